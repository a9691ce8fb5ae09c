// Package process is the "process" isolation tier: the guest agent runs as
// PID 1 of fresh user, pid, mount, network, UTS and IPC namespaces, inside
// cgroups that enforce the sandbox's memory, pids and CPU limits, on an
// overlay root writable through a copy-on-write layer on a tmpfs of
// spec.RootSizeBytes (charged to the sandbox's memory, gone with its mount
// namespace), with the workspace bound read-write. The agent
// drops every capability for the processes it starts and installs a seccomp
// filter. The kernel is shared with the host: this tier is for development
// and trusted code.
//
// Ids: in-sandbox uid/gid N is host uid/gid UIDBase+N (N < UIDCount), so the
// sandbox's root is not the host's. Image layers are attached idmapped
// into the sandbox's user namespace, so a file stored as owned by N (in
// the mapped range) appears owned by the sandbox's N, as in a container:
// the sandbox's root owns the image's /usr, /etc and /root and writes
// them, into its own layer (see mounts). Start chowns the workspace tree to host UIDBase+spec.UID and
// UIDBase+spec.GID (entries that already belong to them are left alone, and
// symlinks are never followed), so the task can write it. Layers and
// HelmrHost must be world-readable (o+rX); their parent directories need not
// be, nor those of AgentPath: the worker hands them to the agent as open
// descriptors. StateDir and its parents must be searchable by others (o+x).
//
// Start is mostly the agent's clone and its move into a cgroup (on cgroup
// v1 the first write of a pid to cgroup.procs waits for an RCU grace
// period). A warm pool (Config.WarmPool) does both ahead of time: its
// agents wait in their namespaces, each in its own cgroup, for a sandbox;
// Start claims one, writes the spec's limits to its cgroup and sends init,
// the mounts passed with it over the agent's socket. The pool refills in
// the background; Close destroys the idle agents.
//
// Cgroups: each agent has one per controller, <CgroupRoot>/<controller>/
// helmr/<name> on v1 and <CgroupRoot>/helmr/<name> on v2, where name is
// pool-<16 hex digits> for an agent from the pool (it keeps that name as a
// sandbox) and the sandbox id for an agent started for its sandbox. The
// state dir is always <StateDir>/<sandbox id>. Destroy removes both.
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/helmr/helmr/internal/sandbox"
)

// Config configures the process tier.
type Config struct {
	// AgentPath is the host path of the static helmr-agent binary.
	AgentPath string
	// StateDir holds one scratch directory per sandbox.
	StateDir string
	// CgroupRoot is where the cgroup hierarchies are mounted (v1: one
	// directory per controller; v2: the unified hierarchy with memory,
	// pids and cpu available). Default /sys/fs/cgroup.
	CgroupRoot string
	// UIDBase is the host uid (and gid) that the sandbox's uid 0 maps to;
	// UIDCount ids are mapped. Defaults 100000 and 65536.
	UIDBase, UIDCount uint32
	// DefaultPids is the pids limit of a spec that sets none. Default 1024.
	DefaultPids int64
	// Logger receives the tier's and the agents' logs. Default: discarded.
	Logger *slog.Logger
	// WarmPool is how many started agents wait for a sandbox (see the
	// package doc); 0 starts each agent in Start. DefaultConfig sets
	// DefaultWarmPool.
	WarmPool int
}

// DefaultConfig returns a Config with every default set, WarmPool
// included; AgentPath and StateDir remain to be set.
func DefaultConfig() Config {
	c := Config{WarmPool: DefaultWarmPool}
	c.setDefaults()
	return c
}

// Defaults.
const (
	DefaultCgroupRoot = "/sys/fs/cgroup"
	DefaultUIDBase    = 100000
	DefaultUIDCount   = 65536
	DefaultPidsLimit  = 1024
	DefaultWarmPool   = 1
	cgroupParent      = "helmr"
)

func (c *Config) setDefaults() {
	if c.CgroupRoot == "" {
		c.CgroupRoot = DefaultCgroupRoot
	}
	if c.UIDBase == 0 {
		c.UIDBase = DefaultUIDBase
	}
	if c.UIDCount == 0 {
		c.UIDCount = DefaultUIDCount
	}
	if c.DefaultPids == 0 {
		c.DefaultPids = DefaultPidsLimit
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Validate reports whether c is usable.
func (c *Config) Validate() error {
	if c.AgentPath == "" || !filepath.IsAbs(c.AgentPath) {
		return errors.New("process tier: AgentPath must be an absolute path")
	}
	if fi, err := os.Stat(c.AgentPath); err != nil {
		return fmt.Errorf("process tier: agent: %w", err)
	} else if fi.Mode().Perm()&0o001 == 0 {
		return fmt.Errorf("process tier: agent %s must be executable by others (the sandbox's host uid)", c.AgentPath)
	}
	if c.StateDir == "" || !filepath.IsAbs(c.StateDir) {
		return errors.New("process tier: StateDir must be an absolute path")
	}
	if uint64(c.UIDBase)+uint64(c.UIDCount) > 1<<32-1 || c.UIDCount == 0 {
		return errors.New("process tier: UIDBase+UIDCount overflows")
	}
	if c.WarmPool < 0 {
		return errors.New("process tier: WarmPool must not be negative")
	}
	return nil
}

// Runtime starts process-tier sandboxes. Close it to destroy the warm pool.
type Runtime struct {
	cfg  Config
	log  *slog.Logger
	pool *pool // nil without a warm pool
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New returns a Runtime; it creates StateDir, removes the empty warm-agent
// cgroups a crashed worker left and starts filling the warm pool.
func New(cfg Config) (*Runtime, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("process tier: state dir: %w", err)
	}
	if err := checkSearchable(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("process tier: state dir: %w", err)
	}
	r := &Runtime{cfg: cfg, log: cfg.Logger}
	sweepPoolCgroups(cfg.CgroupRoot, r.log)
	if cfg.WarmPool > 0 {
		r.pool = newPool(r, cfg.WarmPool)
	}
	return r, nil
}

// Close stops refilling the warm pool and destroys its idle agents.
// Sandboxes already started are not affected, and Start keeps working,
// starting each agent itself.
func (r *Runtime) Close(ctx context.Context) error {
	if err := r.pool.close(ctx); err != nil {
		return fmt.Errorf("close process tier: %w", err)
	}
	return nil
}

// checkSearchable reports an error unless dir and each of its parents can
// be searched by any uid (o+x): the agent reaches its state dir by path,
// as the sandbox's unprivileged host uid.
func checkSearchable(dir string) error {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by others (chmod o+x) and the sandbox's host uid must reach %s", d, dir)
		}
		if d == "/" {
			return nil
		}
	}
}

// Name implements sandbox.Runtime.
func (r *Runtime) Name() string { return "process" }

// Start implements sandbox.Runtime.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := r.normalize(&spec); err != nil {
		return nil, fmt.Errorf("start sandbox %q: %w: %w", spec.ID, sandbox.ErrInvalidSpec, err)
	}
	sb := &Sandbox{
		rt:       r,
		spec:     spec,
		log:      r.log.With("sandbox_id", spec.ID),
		stateDir: filepath.Join(r.cfg.StateDir, spec.ID),
	}
	if err := sb.start(ctx); err != nil {
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

// normalize fills spec's defaults and checks it: the shared checks, then
// that its ids fit the mapped range.
func (r *Runtime) normalize(spec *sandbox.Spec) error {
	if err := spec.Normalize(r.cfg.DefaultPids); err != nil {
		return err
	}
	if spec.RootUpper != "" || len(spec.Mounts) > 0 {
		// Its user namespace maps the image's root to an unprivileged host
		// uid: files the step writes would land in the layer with shifted
		// owners, and the image's root-owned directories are not writable.
		return fmt.Errorf("the process tier cannot run image build steps (writable root, cache mounts); use the gvisor tier")
	}
	if spec.UID >= r.cfg.UIDCount || spec.GID >= r.cfg.UIDCount {
		return fmt.Errorf("uid/gid %d/%d outside the mapped range 0..%d", spec.UID, spec.GID, r.cfg.UIDCount-1)
	}
	return nil
}
