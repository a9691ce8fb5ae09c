package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// agentProc is a helmr-agent started in its namespaces and moved into its
// own cgroup, before it has read init: the spec-independent, slow part of a
// sandbox's start (clone, and the first write of a pid to a cgroup v1
// cgroup.procs, which waits for an RCU grace period). A warm pool holds
// some; a Sandbox owns one.
type agentProc struct {
	cmd    *exec.Cmd
	conn   *net.UnixConn // the worker's end of the agent's stream
	cg     *cgroup
	lw     *logWriter
	exited chan struct{} // closed once the agent has been waited for
}

// spawn starts an agent whose cgroup is named cgName. The agent's only
// inherited descriptors are its stream (fd 3) and its own binary as an
// O_PATH descriptor (fd 4, executed as /proc/self/fd/4, so AgentPath's
// parents need not be searchable by the sandbox's host uid); the mounts
// come with init (see mounts).
func (r *Runtime) spawn(cgName string, log *slog.Logger) (p *agentProc, err error) {
	cg, err := newCgroup(r.cfg.CgroupRoot, cgName)
	if err != nil {
		return nil, err
	}
	p = &agentProc{cg: cg, lw: &logWriter{log: log}, exited: make(chan struct{})}
	defer func() {
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), destroyTimeout)
			defer cancel()
			if derr := p.destroy(ctx, nil); derr != nil {
				log.Warn("clean up failed agent start", "err", derr)
			}
		}
	}()
	if err := cg.create(); err != nil {
		return nil, err
	}
	if err := p.start(r.cfg); err != nil {
		return nil, err
	}
	if err := cg.addProc(p.cmd.Process.Pid); err != nil {
		return nil, err
	}
	return p, nil
}

// start clones the agent into its namespaces and starts the goroutine that
// waits for it.
func (p *agentProc) start(cfg Config) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("agent socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "agent-stream")
	defer theirs.Close()
	ours := os.NewFile(uintptr(fds[0]), "agent-stream")
	conn, err := net.FileConn(ours)
	_ = ours.Close()
	if err != nil {
		return fmt.Errorf("agent stream: %w", err)
	}
	p.conn = conn.(*net.UnixConn)
	bin, err := os.OpenFile(cfg.AgentPath, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open agent: %w", err)
	}
	defer bin.Close()
	idMap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(cfg.UIDBase), Size: int(cfg.UIDCount)}}
	cmd := &exec.Cmd{
		Path:       "/proc/self/fd/4",
		Args:       []string{"helmr-agent", "init"},
		Env:        []string{},
		ExtraFiles: []*os.File{theirs, bin},
		Stdout:     p.lw,
		Stderr:     p.lw,
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
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	p.cmd = cmd
	go func() {
		err := cmd.Wait()
		p.lw.logger().Debug("agent exited", "err", err)
		close(p.exited)
	}()
	return nil
}

// alive reports whether the agent has not been seen to exit.
func (p *agentProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return p.cmd != nil && p.cmd.Process.Signal(syscall.Signal(0)) == nil
	}
}

// destroy kills the agent, which ends its pid namespace, closes its
// stream through c (the Client that owns it; nil: the stream itself),
// waits for the agent and removes the cgroup.
func (p *agentProc) destroy(ctx context.Context, c io.Closer) error {
	var errs []error
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
	}
	if c == nil && p.conn != nil {
		c = p.conn
	}
	if c != nil {
		_ = c.Close()
	}
	if p.cmd != nil {
		select {
		case <-p.exited:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("wait for agent: %w", ctx.Err()))
		}
	}
	if err := p.cg.remove(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
