// Package gvisor is the "gvisor" isolation tier: each sandbox is a runsc
// (gVisor) container on the systrap platform, so task code talks to
// gVisor's user-space kernel (the Sentry), never to the host's.
//
// Per sandbox, Start writes an OCI bundle under StateDir/sandboxes/<id>:
//
//   - the root: a read-only overlayfs, mounted on the host at rootfs/, of a
//     small mountpoints layer over the spec's layers. runsc takes one root
//     directory and its gofer creates missing mountpoints in it, which a
//     read-only root refuses; merging on the host keeps the layers
//     untouched. Over it runsc puts its own overlay (--overlay2
//     root:dir=<bundle>,size=<spec.RootSizeBytes>, see rootOverlay): the
//     root is writable, its changes live in a tmpfs inside the Sentry
//     backed by an unlinked file in the bundle directory, bounded in size,
//     saved by checkpoints and gone with the sandbox. A build step's root
//     (spec.RootUpper) has no such overlay: the host overlay has the
//     step's upper directory and its writes go there.
//   - the workspace bound read-write at spec.Workspace, HelmrHost (or, but
//     for a build step, an empty directory of the bundle) read-only at
//     /opt/helmr, /etc/hostname, /etc/hosts and /etc/resolv.conf bound
//     read-only from files in the bundle directory (never written into a
//     layer), tmpfs /tmp, /run and /dev/shm; gVisor supplies /proc, /sys,
//     /dev and /dev/pts.
//   - the agent binary bound read-only at AgentMount; the agent is the
//     container's first process, `helmr-agent serve --fd 0`.
//   - no network but loopback (--network=none).
//   - limits: memory and CPU through the container's host cgroup
//     (linux.resources, applied by runsc), so they bound the Sentry and the
//     gofer as well as task code. The sandbox's own process limit is
//     RLIMIT_NPROC (spec.PidsLimit), which the Sentry enforces on clone,
//     counting the tasks of each uid (the agent's own threads count towards
//     uid 0's): the agent sets it as its own limit, which what it starts
//     inherits, and holds CAP_SYS_RESOURCE, with which the Sentry never
//     refuses the agent's own clones; the host cgroup's pids limit is a
//     backstop for gVisor's own host threads and stub processes, at least
//     MinHostPids.
//   - the agent runs as uid 0 with the few capabilities it needs (see
//     agentCaps); processes it starts as uid 0 keep CAP_SETGID until
//     `helmr-agent serve` empties the bounding set itself.
//
// The stream to the agent: a socketpair whose one end the worker keeps and
// whose other end is runsc's stdin, which runsc passes into the container
// as its fd 0 (stdin, rather than --pass-fd, so that `runsc restore` can
// hand a restored agent a new stream: see startRunsc). gVisor imports a
// host Unix socket as a socket file, so
// the agent serves it like the process tier's stream; nothing of the
// worker's is reachable by path from inside (no --host-uds).
//
// Ids: gVisor does not remap ids towards the host. Files the sandbox
// creates in the workspace belong, on the host, to the in-sandbox uid and
// gid (a sandbox running as uid 0 creates host-root-owned files there, so
// the workspace's parent must not be reachable by other host users); Start
// chowns the workspace tree to spec.UID:spec.GID. The Sentry and the gofer
// run on the host as uid 0 of user namespaces with an identity map, with a
// handful of capabilities, no_new_privs and a seccomp filter (runsc's
// default when started as root); task code never runs as a host process.
//
// `runsc run` (not detached) runs for the sandbox's whole life and is owned
// by the Sandbox; Destroy is `runsc delete --force`, then it waits for
// `runsc run` to exit, unmounts the root and removes the bundle. New
// deletes sandboxes that a previous worker left in StateDir.
//
// Checkpoints (sandbox.Checkpointer): `runsc checkpoint --image-path DIR`
// saves the running sandbox and stops it; Restore writes a new bundle from
// the same spec and runs `runsc restore --image-path DIR`, with a new
// stream as the restored container's stdin.
package gvisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/helmr/helmr/internal/sandbox"
)

// Config configures the gVisor tier.
type Config struct {
	// RunscPath is the host path of a runsc binary (scripts/install-runsc.sh).
	RunscPath string
	// AgentPath is the host path of the static helmr-agent binary.
	AgentPath string
	// StateDir holds runsc's state (runsc/) and one bundle per sandbox
	// (sandboxes/<id>). Default DefaultStateDir.
	StateDir string
	// Platform is runsc's platform. Default "systrap".
	Platform string
	// CgroupRoot is where the host's cgroup hierarchies are mounted, read
	// for Stats. Default /sys/fs/cgroup.
	CgroupRoot string
	// CgroupParent is the cgroup (below each hierarchy's root) that holds
	// one cgroup per sandbox. Default "helmr-gvisor".
	CgroupParent string
	// DefaultPids is the process limit of a spec that sets none. Default 1024.
	DefaultPids int64
	// MinHostPids is the least pids limit of a sandbox's host cgroup:
	// gVisor itself needs host threads and processes. Default 1024.
	MinHostPids int64
	// DebugLogDir, if set, receives runsc's debug logs (--debug-log).
	DebugLogDir string
	// Logger receives the tier's and the agents' logs. Default: discarded.
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultStateDir     = "/run/helmr/gvisor"
	DefaultPlatform     = "systrap"
	DefaultCgroupRoot   = "/sys/fs/cgroup"
	DefaultCgroupParent = "helmr-gvisor"
	DefaultPidsLimit    = 1024
	DefaultMinHostPids  = 1024
	// AgentMount is where the agent binary appears inside the sandbox.
	AgentMount = "/opt/helmr/.agent/helmr-agent"
)

// DefaultConfig returns a Config with every default set; RunscPath and
// AgentPath remain to be set.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.Platform == "" {
		c.Platform = DefaultPlatform
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
	if c.MinHostPids == 0 {
		c.MinHostPids = DefaultMinHostPids
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Validate reports whether c is usable.
func (c *Config) Validate() error {
	for _, f := range []struct{ name, path string }{{"RunscPath", c.RunscPath}, {"AgentPath", c.AgentPath}} {
		if f.path == "" || !filepath.IsAbs(f.path) {
			return fmt.Errorf("gvisor tier: %s must be an absolute path", f.name)
		}
		fi, err := os.Stat(f.path)
		if err != nil {
			return fmt.Errorf("gvisor tier: %s: %w", f.name, err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("gvisor tier: %s %s is not an executable file", f.name, f.path)
		}
	}
	if !filepath.IsAbs(c.StateDir) {
		return errors.New("gvisor tier: StateDir must be an absolute path")
	}
	if strings.ContainsAny(c.StateDir, ",:") {
		// runsc's --overlay2 names a directory under it and splits on these.
		return fmt.Errorf("gvisor tier: StateDir %q must not contain ',' or ':'", c.StateDir)
	}
	if !cgroupNamePattern.MatchString(c.CgroupParent) {
		return fmt.Errorf("gvisor tier: CgroupParent %q must match %s", c.CgroupParent, cgroupNamePattern)
	}
	if c.DefaultPids < 0 || c.MinHostPids < 0 {
		return errors.New("gvisor tier: negative pids limit")
	}
	return nil
}

// Runtime starts gVisor sandboxes.
type Runtime struct {
	cfg    Config
	log    *slog.Logger
	kernel string // digest of the runsc binary: the sandboxes' kernel
}

var (
	_ sandbox.Runtime      = (*Runtime)(nil)
	_ sandbox.GuestKernel  = (*Runtime)(nil)
	_ sandbox.Checkpointer = (*Runtime)(nil)
)

// New returns a Runtime. It creates StateDir and deletes the sandboxes a
// previous worker with the same StateDir left behind.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Missing parents are made searchable (0711), as other tiers' state
	// may live beside this one (see package tiers); StateDir is private.
	if err := os.MkdirAll(filepath.Dir(cfg.StateDir), 0o711); err != nil {
		return nil, fmt.Errorf("gvisor tier: state dir: %w", err)
	}
	for _, d := range []string{cfg.StateDir, cfg.runscRoot(), cfg.bundles()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("gvisor tier: state dir: %w", err)
		}
	}
	kernel, err := fileDigest(cfg.RunscPath)
	if err != nil {
		return nil, fmt.Errorf("gvisor tier: runsc: %w", err)
	}
	r := &Runtime{cfg: cfg, log: cfg.Logger, kernel: "runsc@" + kernel}
	r.sweep(ctx)
	return r, nil
}

// GuestKernelDigest implements sandbox.GuestKernel: the Sentry is runsc's
// own code, so the binary's digest identifies the kernel.
func (r *Runtime) GuestKernelDigest() string { return r.kernel }

func fileDigest(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func (c *Config) runscRoot() string { return filepath.Join(c.StateDir, "runsc") }
func (c *Config) bundles() string   { return filepath.Join(c.StateDir, "sandboxes") }

// Name implements sandbox.Runtime.
func (r *Runtime) Name() string { return "gvisor" }

// Start implements sandbox.Runtime.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := r.normalize(&spec); err != nil {
		return nil, fmt.Errorf("start sandbox %q: %w: %w", spec.ID, sandbox.ErrInvalidSpec, err)
	}
	return r.start(ctx, spec, "")
}

// start starts a sandbox from spec, or restores one (image set).
func (r *Runtime) start(ctx context.Context, spec sandbox.Spec, image string) (sandbox.Sandbox, error) {
	sb := newSandbox(r, spec)
	if err := sb.start(ctx, image); err != nil {
		if derr := sb.Destroy(context.Background()); derr != nil {
			sb.log.Warn("clean up failed start", "err", derr)
		}
		if errors.Is(err, sandbox.ErrGuestRuntime) || errors.Is(err, sandbox.ErrInvalidSpec) {
			return nil, fmt.Errorf("start sandbox %s: %w", spec.ID, err)
		}
		return nil, fmt.Errorf("start sandbox %s: %w: %w", spec.ID, sandbox.ErrGuestRuntime, err)
	}
	return sb, nil
}

var cgroupNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// normalize fills spec's defaults and checks it.
func (r *Runtime) normalize(spec *sandbox.Spec) error { return spec.Normalize(r.cfg.DefaultPids) }
