// Package sandbox defines the isolation boundary every run executes in: the
// Runtime interface that each isolation tier implements (one subpackage per
// tier) and the Sandbox handle a started sandbox returns.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/helmr/helmr/internal/sandbox/network"
)

// Runtime starts sandboxes of one isolation tier.
type Runtime interface {
	// Name is the tier's name ("process", "gvisor", "microvm").
	Name() string
	// Start creates a sandbox from spec and returns once its guest agent is
	// ready to run processes. The sandbox's life is not tied to ctx: only
	// Destroy ends it. Errors wrap ErrGuestRuntime (the sandbox could not
	// start) or ErrInvalidSpec.
	Start(ctx context.Context, spec Spec) (Sandbox, error)
}

// GuestKernel is implemented by tiers whose sandboxes run on a kernel of
// their own (gVisor's Sentry, a VM's kernel) rather than the host's.
type GuestKernel interface {
	// GuestKernelDigest identifies that kernel ("runsc@sha256:…"): a
	// checkpoint restores only under the same one.
	GuestKernelDigest() string
}

// Checkpointer is implemented by runtimes that can save a running sandbox
// (its memory, processes and open files) and start it again from what
// they saved, on this host or another with the same tier and guest kernel.
type Checkpointer interface {
	// Checkpoint saves sb, a sandbox this runtime started or restored, into
	// dir (an empty directory) and ends it, as Destroy would: afterwards
	// nothing of sb runs. Exec calls running in sb return a
	// *CheckpointedError: their processes go on in the checkpoint and a
	// restored sandbox's Exec re-attaches to them (ExecRequest.Attach).
	// The workspace is not part of the checkpoint: the caller saves it
	// after Checkpoint returns, when nothing writes to it. Bytes the worker
	// sent that the guest had not yet read are lost, so the caller
	// checkpoints a sandbox whose processes are waiting on it. The image
	// is a flat directory of regular files whose last one lists the
	// others' digests (WriteImageDigests).
	Checkpoint(ctx context.Context, sb Sandbox, dir string) error
	// Restore starts a sandbox from the checkpoint in dir. spec is the
	// checkpointed sandbox's spec; host paths (layers, workspace) may
	// differ, the sandbox's shape (mounts, user, limits) may not. The
	// guest resumes where it was, with a fresh stream to its agent.
	// An image that is not what Checkpoint wrote is refused before
	// anything boots from it (VerifyImage; the error wraps
	// ErrTamperedImage too). Errors wrap ErrGuestRuntime (or
	// ErrInvalidSpec).
	Restore(ctx context.Context, spec Spec, dir string) (Sandbox, error)
}

// CheckpointedError is what an Exec running in a sandbox returns when the
// sandbox is checkpointed under it. ExecID names the process for
// ExecRequest.Attach in the restored sandbox.
type CheckpointedError struct {
	ExecID uint64
}

func (e *CheckpointedError) Error() string {
	return fmt.Sprintf("exec %d: sandbox checkpointed", e.ExecID)
}

// Unwrap makes a CheckpointedError match ErrCheckpointed.
func (e *CheckpointedError) Unwrap() error { return ErrCheckpointed }

// Sandbox is a started sandbox with its guest agent.
type Sandbox interface {
	// Exec runs one process inside the sandbox and waits for it to exit.
	// Output chunks and channel messages are delivered to req's callbacks
	// from one goroutine, in order. Cancelling ctx kills the process.
	Exec(ctx context.Context, req ExecRequest) (ExitStatus, error)
	// WriteFile places a file or directory inside the sandbox (a run's
	// secret), as root: see File.
	WriteFile(ctx context.Context, f File) error
	// Stats reports resource facts, such as whether the memory limit was hit.
	Stats() Stats
	// Destroy kills every process of the sandbox and releases its
	// resources; it returns once nothing of the sandbox runs. Safe to call
	// more than once.
	Destroy(ctx context.Context) error
}

// Spec describes a sandbox to start.
type Spec struct {
	// ID names the sandbox (the run id); used in cgroup and directory names.
	ID string
	// RootLayers are host directories stacked read-only to form the root
	// filesystem, lowest first.
	RootLayers []string
	// WorkspaceHost is the host directory mounted read-write at Workspace.
	// A build sandbox (RootUpper set) may have none: its steps write the
	// image, workspace path included.
	WorkspaceHost string
	// WorkspaceImage, in place of WorkspaceHost, is the workspace as an
	// ext4 image file (package disk's), mounted nowhere: a tier whose
	// guest has a kernel of its own attaches it as a block device, and
	// the guest writes it in place. Nothing may mount it while the
	// sandbox runs; the host sees the sandbox's writes once it is
	// destroyed. Only such tiers take one (Spec.NormalizeWithImage);
	// the others refuse it (ErrInvalidSpec).
	WorkspaceImage string
	// RootUpper, if set, makes the sandbox an image build step: what it
	// changes in its root lands in this host directory, an overlayfs upper
	// directory (whiteouts included) that can then serve as a layer,
	// instead of in the discarded layer of RootSizeBytes. RootWork is its
	// empty work directory on the same filesystem. Tiers that cannot
	// write layers with their files' owners refuse it (ErrInvalidSpec).
	RootUpper, RootWork string
	// Mounts are more host directories bound into the sandbox (a build
	// step's cache mounts).
	Mounts []Mount
	// Workspace is the absolute in-guest workspace path (default /workspace).
	Workspace string
	// HelmrHost is a host directory mounted read-only at /opt/helmr (the
	// adapter and the task bundle).
	HelmrHost string
	// Hostname defaults to "helmr-sandbox".
	Hostname string
	// DNS servers written to /etc/resolv.conf (none: an empty file;
	// with Network, default: the sandbox's resolver).
	DNS []string
	// Network, unless nil or its policy is none, gives the sandbox an
	// interface to the outside filtered by the worker's egress policy
	// (see package network); otherwise it has loopback only.
	Network *network.Config
	// UID and GID the sandbox's processes run as, in the image's own ids.
	UID, GID uint32
	// Resources enforced on the whole sandbox.
	CPU         float64 // vCPUs; 0 means unlimited
	MemoryBytes int64   // 0 means unlimited
	PidsLimit   int64   // 0 means the tier's default
	// RootSizeBytes bounds the sandbox's writable root: every sandbox but
	// an image build step (RootUpper) gets a copy-on-write layer over
	// RootLayers that takes its writes outside the workspace and the
	// runtime's own mounts, holds at most this many bytes (a write past
	// it fails with ENOSPC), is carried through checkpoints and is
	// discarded with the sandbox, never written to a layer. 0 means
	// DefaultRootSize. Where the layer lives is the tier's: the process
	// tier keeps it in memory (charged to MemoryBytes), gVisor in a file
	// beside the sandbox's bundle on the worker's disk.
	RootSizeBytes int64
}

// File is a file or directory to place inside a sandbox: at Path (no
// symlink on the way; missing parents root-owned 0755), owned by UID:GID
// with Mode. With Reader set, the sandbox checks that Reader (its uid and
// gid, no capabilities) can reach and read it, and fails if not.
type File struct {
	Path     string
	Data     []byte
	Mode     uint32
	UID, GID uint32
	Dir      bool
	Reader   *[2]uint32
}

// Mount binds a host directory into a sandbox.
type Mount struct {
	Source   string // absolute host path of a directory
	Dest     string // absolute path inside the sandbox, outside the reserved paths
	ReadOnly bool
}

// ExecRequest is one process to run inside a sandbox.
type ExecRequest struct {
	Argv []string
	Env  []string // KEY=VALUE, the whole environment
	Cwd  string   // default: the workspace
	// Channel, when true, gives the process a bidirectional message channel
	// on fd 3 (newline-delimited JSON). Messages it writes arrive at
	// OnMessage; Send writes to it.
	Channel   bool
	OnOutput  func(stream string, data []byte)
	OnMessage func(msg []byte)
	// Started, if set, receives a Sender for the channel once the process runs.
	Started func(s Sender)
	Stdin   io.Reader
	// Attach, if not zero, starts nothing: Exec attaches to the process
	// that a checkpoint of this sandbox cut off (CheckpointedError.ExecID)
	// and delivers its output, messages and exit as for a process it
	// started; Started is called at once. Argv names it in errors.
	Attach uint64
	// TTY, if set, runs the process on a pseudo-terminal of this size
	// (an interactive shell): it leads a session whose controlling
	// terminal that is, in the terminal's default modes (echo on); Stdin
	// is typed into it (its end closes nothing), everything it prints
	// arrives at OnOutput as "stdout", and the Sender that Started
	// receives is also a Resizer.
	TTY *WinSize
}

// WinSize is a terminal's size in characters: 1 to MaxWinSize each.
type WinSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// MaxWinSize bounds each of a terminal's dimensions.
const MaxWinSize = 1000

// Valid reports whether both dimensions are within 1..MaxWinSize.
func (w WinSize) Valid() bool {
	return w.Rows >= 1 && w.Cols >= 1 && w.Rows <= MaxWinSize && w.Cols <= MaxWinSize
}

// Sender writes one message to a process's channel.
type Sender interface {
	Send(msg []byte) error
}

// Resizer is what the Sender of a process started with ExecRequest.TTY
// also does: set its terminal's size.
type Resizer interface {
	Resize(size WinSize) error
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"` // e.g. "killed"
}

// Stats are resource facts about a sandbox.
type Stats struct {
	// OOMKilled is true once the kernel killed a process for exceeding the
	// sandbox's memory limit.
	OOMKilled bool
	// PidsLimitHit is true once a fork failed at the pids limit.
	PidsLimitHit bool
	// CPUTime is the CPU time the sandbox has used as the host accounts
	// it (its host cgroup), where the tier knows it; 0 otherwise.
	CPUTime time.Duration
}

// Errors that callers branch on.
var (
	// ErrGuestRuntime: the sandbox or its agent failed (not the task).
	ErrGuestRuntime = errors.New("guest runtime")
	// ErrInvalidSpec: the spec itself is unusable (reserved path, ...).
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrCheckpointed: the sandbox was checkpointed (see Checkpointer).
	ErrCheckpointed = errors.New("sandbox checkpointed")
)

// ReservedPaths may not be used as a workspace or application root.
var ReservedPaths = []string{"/dev", "/proc", "/sys", "/run", "/tmp", "/opt/helmr"}

// IsReserved reports whether p is a reserved path or lies under one, or is /.
func IsReserved(p string) bool {
	if p == "/" {
		return true
	}
	for _, r := range ReservedPaths {
		if p == r || len(p) > len(r) && p[:len(r)] == r && p[len(r)] == '/' {
			return true
		}
	}
	return false
}
