package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent"
	"github.com/helmr/helmr/internal/sandbox"
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

	cg     *cgroup
	cmd    *exec.Cmd
	client *agent.Client
	exited chan struct{} // closed once the agent has been waited for

	destroyOnce sync.Once
	destroyErr  error
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// start brings the sandbox up: state dir, workspace ownership, cgroups, the
// agent in its namespaces (moved into the cgroups before it reads init),
// then init → ready.
func (s *Sandbox) start(ctx context.Context) error {
	cfg := s.rt.cfg
	if err := os.Mkdir(s.stateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := os.Chown(s.stateDir, int(cfg.UIDBase), int(cfg.UIDBase)); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := chownTree(s.spec.WorkspaceHost, int(cfg.UIDBase+s.spec.UID), int(cfg.UIDBase+s.spec.GID)); err != nil {
		return fmt.Errorf("workspace ownership: %w", err)
	}
	cg, err := newCgroup(cfg.CgroupRoot, s.spec.ID, s.spec.CPU > 0)
	if err != nil {
		return err
	}
	s.cg = cg
	if err := cg.create(s.spec); err != nil {
		return err
	}
	launch, err := s.prepareLaunch()
	if err != nil {
		return err
	}
	defer launch.closeChildFiles()
	if err := s.launch(launch); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	version, err := s.client.Init(ctx, launch.init)
	if err != nil {
		return err
	}
	s.log.Debug("sandbox ready", "agent_version", version)
	return nil
}

// launch starts the agent, moves it into the cgroups and starts the
// client and the goroutine that waits for the agent.
func (s *Sandbox) launch(l *launch) error {
	cfg := s.rt.cfg
	idMap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(cfg.UIDBase), Size: int(cfg.UIDCount)}}
	lw := &logWriter{log: s.log}
	s.cmd = &exec.Cmd{
		Path:       l.agentPath,
		Args:       []string{"helmr-agent", "init"},
		Env:        []string{},
		ExtraFiles: l.childFiles,
		Stdout:     lw,
		Stderr:     lw,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS |
				unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC,
			UidMappings:                idMap,
			GidMappings:                idMap,
			GidMappingsEnableSetgroups: true,
			// The clone keeps the host's uid 0, which is unmapped in the
			// new namespace; become the namespace's root (host UIDBase).
			Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
			// Pdeathsig fires when the OS thread that started the agent
			// exits; the Go runtime keeps threads unless a goroutine
			// that locked one returns without unlocking it.
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if err := s.cmd.Start(); err != nil {
		_ = l.conn.Close()
		s.cmd = nil
		return fmt.Errorf("start agent: %w", err)
	}
	go func() {
		err := s.cmd.Wait()
		s.log.Debug("agent exited", "err", err)
		close(s.exited)
	}()
	s.client = agent.NewClient(l.conn, s.log)
	if err := s.cg.addProc(s.cmd.Process.Pid); err != nil {
		return err
	}
	return nil
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
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		if s.client != nil {
			_ = s.client.Close()
		}
		select {
		case <-s.exited:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("wait for agent: %w", ctx.Err()))
		}
	}
	if s.cg != nil {
		if err := s.cg.remove(ctx); err != nil {
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
	log  *slog.Logger
	mu   sync.Mutex
	line []byte
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
