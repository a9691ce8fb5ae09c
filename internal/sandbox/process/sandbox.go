package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/agent"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
)

// Timeouts: for the agent's setup, and for Destroy to see the agent and
// the cgroups gone.
const (
	startupTimeout = 30 * time.Second
	destroyTimeout = 10 * time.Second
)

// Sandbox is a running process-tier sandbox.
type Sandbox struct {
	rt       *Runtime
	spec     sandbox.Spec
	log      *slog.Logger
	stateDir string

	proc   *agentProc
	cg     *cgroup // proc's
	client *agent.Client
	link   *network.Link // the sandbox's interface, if its spec has a network

	destroyOnce sync.Once
	destroyErr  error
}

var (
	_ sandbox.Sandbox = (*Sandbox)(nil)
	_ sandbox.Shells  = (*Sandbox)(nil)
)

// start brings the sandbox up: state dir and workspace ownership, an agent
// (a warm one from the pool, else one started now) with spec's limits
// written to its cgroup, then init with the mounts → ready. A warm agent
// that cannot take the sandbox (it died, say) is destroyed and a fresh one
// started instead.
func (s *Sandbox) start(ctx context.Context) error {
	if err := s.prepareHost(); err != nil {
		return err
	}
	init, m, err := initFor(s.spec, s.stateDir)
	if err != nil {
		return err
	}
	defer m.close()
	if p := s.rt.pool.take(); p != nil {
		err := s.adopt(p, init, m)
		if err == nil {
			m.close()
			return s.waitReady(ctx, true)
		}
		s.log.Warn("warm agent unusable, starting a fresh one", "err", err)
		if derr := s.dropAgent(ctx); derr != nil {
			s.log.Warn("destroy unusable warm agent", "err", derr)
		}
		if s.link != nil {
			_ = s.link.Close()
		}
		s.proc, s.client, s.link = nil, nil, nil
	}
	p, err := s.rt.spawn(s.spec.ID, s.log)
	if err != nil {
		return err
	}
	if err := s.adopt(p, init, m); err != nil {
		return err
	}
	m.close()
	return s.waitReady(ctx, false)
}

// prepareHost makes the state dir and gives the workspace to the
// sandbox's user.
func (s *Sandbox) prepareHost() error {
	cfg := s.rt.cfg
	if err := os.Mkdir(s.stateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := os.Chown(s.stateDir, int(cfg.UIDBase), int(cfg.UIDBase)); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := sandbox.ChownTree(s.spec.WorkspaceHost, int(cfg.UIDBase+s.spec.UID), int(cfg.UIDBase+s.spec.GID)); err != nil {
		return fmt.Errorf("workspace ownership: %w", err)
	}
	return nil
}

// adopt makes p the sandbox's agent: its logs are the sandbox's, its cgroup
// gets spec's limits, and it is sent init with the mounts' descriptors,
// the layers idmapped into its user namespace.
func (s *Sandbox) adopt(p *agentProc, init *agent.Init, m *mounts) error {
	s.proc, s.cg = p, p.cg
	p.lw.setLogger(s.log)
	if err := p.cg.writeLimits(s.spec); err != nil {
		return err
	}
	if s.spec.Network.Attaches() {
		link, err := network.Attach(fmt.Sprintf("/proc/%d/ns/net", p.cmd.Process.Pid), s.spec.ID, s.spec.Network)
		if err != nil {
			return err
		}
		s.link = link
	}
	if err := m.idmap(p.cmd.Process.Pid); err != nil {
		return err
	}
	s.client = agent.NewClient(p.conn, s.log)
	return s.client.SendInit(init, m.fds)
}

// waitReady waits for the agent's answer to init; warm says whether the
// agent came from the pool.
func (s *Sandbox) waitReady(ctx context.Context, warm bool) error {
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	version, err := s.client.WaitReady(ctx)
	if err != nil {
		return err
	}
	s.log.Debug("sandbox ready", "agent_version", version, "warm", warm, "cgroup", filepath.Base(s.cg.memory))
	return nil
}

// dropAgent destroys the sandbox's agent, its client and its cgroup. The
// fields stay set: Exec and Stats may still run, and fail or read nothing.
func (s *Sandbox) dropAgent(ctx context.Context) error {
	if s.proc == nil {
		return nil
	}
	var c io.Closer
	if s.client != nil {
		c = s.client
	}
	return s.proc.destroy(ctx, c)
}

// Exec implements sandbox.Sandbox. The process runs as the spec's uid and
// gid, in the workspace unless req.Cwd says otherwise.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	if req.Cwd == "" {
		req.Cwd = s.spec.Workspace
	}
	return s.client.Exec(ctx, req, s.spec.UID, s.spec.GID)
}

// Stats implements sandbox.Sandbox.
func (s *Sandbox) Stats() sandbox.Stats {
	if s.cg == nil {
		return sandbox.Stats{}
	}
	return s.cg.stats()
}

// Destroy implements sandbox.Sandbox: SIGKILL to the agent ends the whole
// pid namespace; then the cgroups and the state dir are removed.
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.destroyOnce.Do(func() { s.destroyErr = s.destroy(ctx) })
	return s.destroyErr
}

func (s *Sandbox) destroy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, destroyTimeout)
	defer cancel()
	var errs []error
	if err := s.dropAgent(ctx); err != nil {
		errs = append(errs, err)
	}
	if s.link != nil {
		if err := s.link.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(s.stateDir); err != nil {
		errs = append(errs, fmt.Errorf("remove state dir: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", s.spec.ID, err)
	}
	return nil
}

// logWriter turns the agent's stderr into log records, one per line.
type logWriter struct {
	mu   sync.Mutex
	log  *slog.Logger
	line []byte
}

// setLogger sends later lines to log (a warm agent's, once claimed, to its
// sandbox's logger).
func (w *logWriter) setLogger(log *slog.Logger) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = log
}

func (w *logWriter) logger() *slog.Logger {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range p {
		if b != '\n' {
			if len(w.line) < 16<<10 {
				w.line = append(w.line, b)
			}
			continue
		}
		w.log.Info("agent", "line", string(w.line))
		w.line = w.line[:0]
	}
	return len(p), nil
}

// WriteFile implements sandbox.Sandbox through the agent.
func (s *Sandbox) WriteFile(ctx context.Context, f sandbox.File) error {
	if s.client == nil {
		return fmt.Errorf("%w: sandbox %s has no agent", sandbox.ErrGuestRuntime, s.spec.ID)
	}
	return s.client.PlaceFile(ctx, f)
}

// Shell implements sandbox.Shells: the guest agent holds the sessions. An
// open without a Cwd starts in the workspace.
func (s *Sandbox) Shell(ctx context.Context, req sandbox.ShellRequest) (sandbox.ShellResult, error) {
	if s.client == nil {
		return sandbox.ShellResult{}, fmt.Errorf("%w: sandbox %s has no agent", sandbox.ErrGuestRuntime, s.spec.ID)
	}
	if req.Op == sandbox.ShellOpen && req.Cwd == "" {
		req.Cwd = s.spec.Workspace
	}
	return s.client.Shell(ctx, req)
}
