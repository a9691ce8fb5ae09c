// Package microvm is the "microvm" isolation tier: each sandbox is a
// virtual machine with a kernel of its own, run by QEMU's microvm machine
// or, on KVM hosts, by a jailed Firecracker (package firecracker). Both
// boot the guest format of package guestfmt: the same kernel (QEMU the
// bzImage, Firecracker the ELF vmlinux of the same build), initramfs and
// disks. Config.VMM picks (HELMR_MICROVM_VMM; ChooseVMM): auto takes
// Firecracker only where its binaries (1.8 or later) are installed and
// /dev/kvm boots a stock kernel, else QEMU.
//
// Accelerator: KVM where a probe boots the guest kernel under /dev/kvm,
// else TCG. TCG is emulation, NOT a security boundary: QEMU's emulator
// runs the guest's code in the QEMU process, so a TCG guest is as strong
// as QEMU's own code (plus its seccomp sandbox and its unprivileged uid);
// Runtime.Accel says which one runs and the tier registry never lets
// `auto` pick a TCG microvm.
//
// Per sandbox, Start:
//
//   - makes the disks (package guestfmt): one cached read-only ext4 image
//     per root layer, /opt/helmr from spec.HelmrHost, and the workspace:
//     spec.WorkspaceImage (the worker's quota disk, unmounted) attached
//     in place, or, for a workspace directory, a copy of it in an image
//     of the tier's, copied back into the directory when the sandbox ends
//     (Destroy). Either way the host sees the sandbox's workspace writes
//     once it is destroyed, never while it runs (see workspace.go);
//   - with a network in the spec, a wire (network.NewWire): a datagram
//     socket pair whose far end is the worker's user-space stack, the one
//     behind the other tiers' TAP, so that egress policy, reports and
//     credential injection apply unchanged. The guest's end is QEMU's
//     virtio-net device (-netdev dgram on the descriptor);
//   - starts QEMU `-M microvm` with no default devices, the guest's console
//     on QEMU's stdout (into the sandbox's log), the disks as
//     virtio-blk-device, the agent's stream and the init's control channel
//     (guest.VMCtl) as virtio-serial ports and QEMU's monitor (QMP), each
//     on one end of a socketpair, vCPUs and memory from the spec (plus the
//     guest kernel's own), QEMU's seccomp
//     sandbox on (-sandbox on,obsolete=deny,elevateprivileges=deny,
//     spawn=deny,resourcecontrol=deny), as Config.UID:GID (a uid of its
//     own, no supplementary groups), in network, PID, mount, IPC and UTS
//     namespaces of its own and a host cgroup of its own bounding
//     its memory (guest RAM plus QEMU's overhead), CPU and threads. Every
//     host resource reaches QEMU as an inherited descriptor, never a path.
//     QEMU boots the guest to its idle moment (drivers loaded, disks
//     probed, nothing mounted) or, once a guest of the same machine shape
//     has been there, restores a snapshot of that moment instead
//     (bootSnapshots, snapshot.go: seconds become a fraction of one);
//   - tells the init the sandbox's limits, workspace owner and network,
//     with this host's clock and fresh entropy (a restored guest's would
//     be its snapshot's), on the control channel (guest.VMStart), and
//     sends the agent the process tier's init (agent.Init) over its port.
//     The guest's init (helmr-agent as PID 1, guest.RunVM) sets the clock,
//     reseeds the kernel's generator, mounts the disks, sets eth0 up,
//     mounts cgroup2 and makes the sandbox's cgroup with the spec's
//     memory.max, pids.max and cpu.max, and started the sandbox's agent
//     (guest.RunVMSandbox) in it, as PID 1 of fresh PID, mount, UTS and
//     IPC namespaces; that agent builds the root as an overlay of the
//     layer disks with a tmpfs upper layer of spec.RootSizeBytes, binds
//     the workspace disk and /opt/helmr, sets hostname, hosts and
//     resolver files, binds /proc's kernel knobs (sys, sysrq-trigger,
//     ...) read-only and serves. Start returns once it answers ready.
//
// Limits are the guest kernel's: the host learns of an OOM kill from the
// kernel's line on the console (Stats.OOMKilled), not of a refused fork
// (Stats.PidsLimitHit stays false); CPU time is the guest's own account.
//
// A QEMU crash or a guest kernel panic (panic=-1 with -no-reboot: QEMU
// exits) ends the agent's stream: running and later Execs fail with
// sandbox.ErrGuestRuntime, naming QEMU's exit and the console's last lines.
// Destroy kills QEMU, copies a workspace directory back or leaves a
// workspace image clean for the host (its journal replayed: settle.go),
// closes the network and removes the sandbox's directory and cgroup.
//
// The worker drives the tier through Runtime.Traits: it hands over its
// quota disks unmounted (Spec.WorkspaceImage), and places the files it
// has once a sandbox runs (a run's task) through the agent, which keeps
// /opt/helmr writable to itself only (agent.Init.HelmrWritable).
//
// Runtime is a sandbox.Checkpointer (checkpoint.go): a running sandbox is
// saved as QEMU's migration stream plus its own disks' data, and restored
// on any worker with the same QEMU, accelerator, kernel, agent and TSC
// rate (GuestKernelDigest), its processes and memory intact.
//
// Under Firecracker (firecracker.go), Start differs where Firecracker
// does: its jailer closes every descriptor it is handed, so the kernel,
// initramfs and disks reach it by path, hard linked (or bind mounted) into
// its jail, read-only images readable by the VMM's group and a writable
// one owned by its uid until Destroy gives it back; the jailer makes the
// cgroup with the VM's limits and joins a network namespace of the
// sandbox's: the bridged TAP of network.NewVMTap (Firecracker opens a TAP
// by name) or an empty one; the API configures and starts the VM
// (firecracker.Machine); its disks carry no serial of ours, so the
// command line names them in attach order (guest.VMArgDiskNames); the
// init's control channel and the agent's stream are the guest's vsock
// ports agentVsockPort+1 and agentVsockPort, reached through
// Firecracker's hybrid vsock socket; the guest ends by a reboot (panic=1
// reboot=k: Firecracker exits on it, it has no ACPI power-off). A dead
// worker's Firecrackers outlive it (the jailer's uid change clears the
// parent-death signal): sweep kills them by their cgroups. Firecracker
// guests always boot (no boot snapshots) and do not checkpoint:
// Firecracker resets vsock connections when it snapshots, which the
// agent's stream does not survive (fcsnapshot.go takes and loads full
// snapshots for when it does).
//
// What runs where: the QEMU path is tested here, under TCG on a host
// whose KVM boots no stock kernel. The Firecracker path has not run on
// this project's machines (no Firecracker binary is reachable there, and
// their KVM is a PVM hypervisor): its requests are checked against
// Firecracker's published API schema and its files, cgroups and network
// on the host in unit tests; TestFirecrackerBootExecSnapshot boots,
// execs and snapshots under it where the binaries and a stock-kernel KVM
// are, and is reported as not run elsewhere (helmr doctor says why).
//
// Not in this pass: image build steps (spec.RootUpper) and extra mounts
// (spec.Mounts): Start refuses them (sandbox.ErrInvalidSpec); a microvm
// worker runs build steps on another tier.
package microvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/disk"
	"github.com/helmr/helmr/internal/sandbox/microvm/firecracker"
	"github.com/helmr/helmr/internal/sandbox/microvm/guestfmt"
)

// Defaults.
const (
	DefaultStateDir     = "/run/helmr/microvm"
	DefaultCgroupRoot   = "/sys/fs/cgroup"
	DefaultCgroupParent = "helmr-microvm"
	// DefaultQEMUUID is the host uid and gid QEMU runs as: one no account
	// uses, outside the ranges the process tier maps into sandboxes.
	DefaultQEMUUID = 64055
	// DefaultMemory is a guest's memory when the spec sets none.
	DefaultMemory = 512 << 20
	// guestMemOverhead is the guest's memory beyond the sandbox's: its
	// kernel, init and page tables live outside the sandbox's cgroup,
	// which alone is limited to the spec's memory.
	guestMemOverhead = 96 << 20
	// MinMemory is the least memory a guest boots with.
	MinMemory = 128 << 20
	// DefaultPidsLimit is the sandbox's process limit when the spec sets none.
	DefaultPidsLimit = 1024
	// DefaultWorkspaceSize is the least size of a workspace image made
	// from a directory.
	DefaultWorkspaceSize = 1 << 30
)

// Config configures the microvm tier.
type Config struct {
	// QEMUPath is qemu-system-x86_64. Default: found in PATH.
	QEMUPath string
	// Kernel is the guest kernel (guestfmt.FindKernel).
	Kernel guestfmt.Kernel
	// AgentPath is the static helmr-agent binary (the guest's init).
	AgentPath string
	// StateDir holds the initramfs, the layer images (layers/) and one
	// directory per sandbox (sandboxes/<id>).
	StateDir string
	// Accel is AccelKVM, AccelTCG or empty: KVM where ProbeKVM says a stock
	// kernel boots under /dev/kvm, else TCG.
	Accel string
	// VMM is VMMQEMU, VMMFirecracker or VMMAuto (empty: auto): see
	// ChooseVMM. The KVM probe boots QEMU either way.
	VMM string
	// Firecracker is Firecracker's install (firecracker.Find); found in
	// PATH when unset and the VMM may be Firecracker.
	Firecracker firecracker.Install
	// UID and GID the VMM runs as. Default DefaultQEMUUID.
	UID, GID uint32
	// CgroupRoot and CgroupParent place each QEMU's cgroup.
	CgroupRoot, CgroupParent string
	// DefaultPids is the process limit of a spec that sets none.
	DefaultPids int64
	// WorkspaceSize is the least size of a workspace image.
	WorkspaceSize int64
	// NoBootSnapshots boots every guest rather than restoring a snapshot
	// of an idle one (see bootSnapshots): for measuring a cold boot.
	NoBootSnapshots bool
	// Logger receives the tier's logs and the guests' consoles.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.QEMUPath == "" {
		c.QEMUPath, _ = exec.LookPath("qemu-system-x86_64")
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.UID == 0 {
		c.UID = DefaultQEMUUID
	}
	if c.GID == 0 {
		c.GID = c.UID
	}
	if c.CgroupRoot == "" {
		c.CgroupRoot = DefaultCgroupRoot
	}
	if c.CgroupParent == "" {
		c.CgroupParent = DefaultCgroupParent
	}
	if c.DefaultPids == 0 {
		c.DefaultPids = DefaultPidsLimit
	}
	if c.WorkspaceSize == 0 {
		c.WorkspaceSize = DefaultWorkspaceSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.VMM != VMMQEMU && c.Firecracker.Firecracker == "" && c.Firecracker.Jailer == "" {
		c.Firecracker = firecracker.Find()
	}
}

// Validate reports whether c is usable.
func (c *Config) Validate() error {
	if c.QEMUPath == "" {
		return errors.New("microvm tier: qemu-system-x86_64 not found (run scripts/install-microvm.sh)")
	}
	if c.Kernel.Bzimage == "" {
		return errors.New("microvm tier: no guest kernel (run scripts/install-microvm.sh)")
	}
	if !filepath.IsAbs(c.AgentPath) {
		return errors.New("microvm tier: AgentPath must be an absolute path")
	}
	if !filepath.IsAbs(c.StateDir) {
		return errors.New("microvm tier: StateDir must be an absolute path")
	}
	switch c.Accel {
	case "", AccelKVM, AccelTCG:
	default:
		return fmt.Errorf("microvm tier: accelerator %q (want kvm or tcg)", c.Accel)
	}
	if err := CheckVMM(c.VMM); err != nil {
		return fmt.Errorf("microvm tier: %w", err)
	}
	return nil
}

// Runtime starts microVM sandboxes.
type Runtime struct {
	cfg       Config
	log       *slog.Logger
	initramfs string
	accel     string
	accelWhy  string
	boots     *bootSnapshots
	now       func() time.Time // the clock guests get (tests move it)
	vmm       string           // VMMQEMU or VMMFirecracker
	vmmWhy    string
}

var (
	_ sandbox.Runtime     = (*Runtime)(nil)
	_ sandbox.GuestKernel = (*Runtime)(nil)
)

// New returns a Runtime: it builds the initramfs, picks the accelerator
// and removes the sandboxes a previous worker left in StateDir.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.StateDir), 0o711); err != nil {
		return nil, fmt.Errorf("microvm tier: state dir: %w", err)
	}
	for _, d := range []string{cfg.StateDir, cfg.layers(), cfg.sandboxes()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("microvm tier: state dir: %w", err)
		}
	}
	initramfs, err := guestfmt.BuildInitramfs(cfg.StateDir, cfg.AgentPath, cfg.Kernel)
	if err != nil {
		return nil, fmt.Errorf("microvm tier: %w", err)
	}
	r := &Runtime{cfg: cfg, log: cfg.Logger, initramfs: initramfs, accel: cfg.Accel, now: time.Now}
	if r.accel == "" {
		r.accel, r.accelWhy = ChooseAccel(cfg.QEMUPath, cfg.Kernel.Bzimage, initramfs)
	}
	r.vmm, r.vmmWhy, err = ChooseVMM(cfg.VMM, cfg.Firecracker, r.accel, r.accelWhy)
	if err != nil {
		return nil, err
	}
	// Firecracker guests always boot: see the package doc.
	if r.boots, err = newBootSnapshots(filepath.Join(cfg.StateDir, "snapshots"), r, cfg.NoBootSnapshots || r.vmm == VMMFirecracker); err != nil {
		return nil, fmt.Errorf("microvm tier: %w", err)
	}
	r.log.Info("microvm tier", "accel", r.accel, "why", r.accelWhy, "vmm", r.vmm, "vmm_why", r.vmmWhy,
		"kernel", cfg.Kernel.Version, "security_boundary", r.accel == AccelKVM)
	r.sweep()
	return r, nil
}

var (
	probeMu    sync.Mutex
	probeCache = map[string][2]string{}
)

// ChooseAccel returns AccelKVM when the kernel boots under /dev/kvm, else
// AccelTCG, and why. The probe boots a VM once per kernel and process.
func ChooseAccel(qemu, kernel, initramfs string) (accel, why string) {
	probeMu.Lock()
	defer probeMu.Unlock()
	if r, ok := probeCache[kernel]; ok {
		return r[0], r[1]
	}
	ok, why := probeKVM(qemu, kernel, initramfs)
	accel = AccelTCG
	if ok {
		accel = AccelKVM
	}
	probeCache[kernel] = [2]string{accel, why}
	return accel, why
}

// Initramfs is the path of the guests' initramfs.
func (r *Runtime) Initramfs() string { return r.initramfs }

// Accel is the accelerator this runtime's guests run with: AccelKVM (a
// hardware boundary) or AccelTCG (emulation, not a security boundary).
// Firecracker guests run under KVM only.
func (r *Runtime) Accel() string { return r.accel }

// VMM is the VMM this runtime's guests run under: VMMQEMU or
// VMMFirecracker.
func (r *Runtime) VMM() string { return r.vmm }

// GuestKernelDigest implements sandbox.GuestKernel: the guest's kernel
// version, the VMM and a digest of what a VM's memory depends on
// besides its shape (QEMU's binary, the accelerator, the kernel, the
// initramfs with the agent, the TSC rate): a checkpoint restores only
// where it is the same.
func (r *Runtime) GuestKernelDigest() string {
	h := sha256.Sum256([]byte(r.guest()))
	return "linux-" + r.cfg.Kernel.Version + "+" + r.vmm + "-" + r.accel + "@sha256:" + hex.EncodeToString(h[:12])
}

// Name implements sandbox.Runtime.
func (r *Runtime) Name() string { return "microvm" }

func (c *Config) layers() string    { return filepath.Join(c.StateDir, "layers") }
func (c *Config) sandboxes() string { return filepath.Join(c.StateDir, "sandboxes") }

// Start implements sandbox.Runtime.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := r.normalize(&spec); err != nil {
		return nil, fmt.Errorf("start sandbox %q: %w: %w", spec.ID, sandbox.ErrInvalidSpec, err)
	}
	sb := newSandbox(r, spec)
	if err := sb.start(ctx); err != nil {
		if derr := sb.Destroy(context.Background()); derr != nil {
			sb.log.Warn("clean up failed start", "err", derr)
		}
		if errors.Is(err, sandbox.ErrGuestRuntime) {
			return nil, fmt.Errorf("start sandbox %s: %w", spec.ID, err)
		}
		return nil, fmt.Errorf("start sandbox %s: %w: %w", spec.ID, sandbox.ErrGuestRuntime, err)
	}
	return sb, nil
}

// normalize fills spec's defaults and refuses what this pass lacks.
func (r *Runtime) normalize(spec *sandbox.Spec) error {
	if err := spec.NormalizeWithImage(r.cfg.DefaultPids); err != nil {
		return err
	}
	switch {
	case spec.RootUpper != "":
		return errors.New("the microvm tier does not run image build steps yet")
	case len(spec.Mounts) > 0:
		return errors.New("the microvm tier takes no extra mounts yet")
	case spec.WorkspaceHost == "" && spec.WorkspaceImage == "":
		return errors.New("the microvm tier needs a workspace")
	case spec.WorkspaceImage != "" && disk.Attached(spec.WorkspaceImage):
		return fmt.Errorf("workspace image %s is mounted on the host", spec.WorkspaceImage)
	}
	return nil
}
