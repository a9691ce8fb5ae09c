package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
)

// Timeouts: for the container to start and its agent to answer, and for
// Destroy to see runsc and the container gone.
const (
	startupTimeout = 60 * time.Second
	destroyTimeout = 10 * time.Second
)

// Sandbox is a running gVisor sandbox.
type Sandbox struct {
	rt     *Runtime
	spec   sandbox.Spec
	log    *slog.Logger
	bundle bundle
	cg     cgroupStats

	run    *exec.Cmd     // `runsc run`, for the sandbox's whole life
	exited chan struct{} // closed once run has been waited for
	logs   chan struct{} // closed once the container's output is drained
	output *logWriter
	client *agent.Client
	link   *network.Link // the sandbox's interface, if its spec has a network

	destroyOnce sync.Once
	destroyErr  error
}

var (
	_ sandbox.Sandbox = (*Sandbox)(nil)
	_ sandbox.Shells  = (*Sandbox)(nil)
)

func newSandbox(r *Runtime, spec sandbox.Spec) *Sandbox {
	return &Sandbox{
		rt:     r,
		spec:   spec,
		log:    r.log.With("sandbox_id", spec.ID),
		bundle: bundle{dir: filepath.Join(r.cfg.bundles(), spec.ID)},
		cg:     newCgroupStats(r.cfg.CgroupRoot, r.cfg.CgroupParent, spec.ID),
	}
}

// start writes the bundle, gives the workspace to the sandbox's user,
// starts `runsc run` with the agent's stream and waits for ready; with
// image set, it restores that checkpoint instead, whose agent is already
// past ready.
func (s *Sandbox) start(ctx context.Context, image string) error {
	if s.spec.Network.Attaches() {
		s.bundle.netns = filepath.Join(s.bundle.dir, "netns")
	}
	if err := s.bundle.write(&s.rt.cfg, s.spec); err != nil {
		return err
	}
	if s.bundle.netns != "" {
		link, err := network.Create(s.bundle.netns, s.spec.ID, s.spec.Network)
		if err != nil {
			return err
		}
		s.link = link
	}
	if s.spec.WorkspaceHost != "" {
		if err := sandbox.ChownTree(s.spec.WorkspaceHost, int(s.spec.UID), int(s.spec.GID)); err != nil {
			return fmt.Errorf("workspace ownership: %w", err)
		}
	}
	conn, err := s.startRunsc(image)
	if err != nil {
		return err
	}
	s.client = agent.NewClient(conn, s.log)
	if image != "" {
		return s.waitRestored(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	version, err := s.client.WaitReady(ctx)
	if err != nil {
		return err
	}
	s.log.Debug("sandbox ready", "agent_version", version)
	return nil
}

// startRunsc starts `runsc run` (or, with image set, `runsc restore` from
// that checkpoint) with one end of a socketpair as the container's stdin
// and returns the other end. The container's stdout and stderr (the
// agent's logs) and runsc's own go to the sandbox's log.
//
// The stream is stdin, not a passed descriptor, because gVisor saves host
// descriptors by their number in the container and `runsc restore` maps
// only the restoring process's stdio back (boot/restore.go builds its
// descriptor map from the containers' stdio and --pass-fd descriptors, and
// restore takes no --pass-fd): the restored agent reads and writes the new
// socket through the same descriptor.
func (s *Sandbox) startRunsc(image string) (net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "agent-stream")
	defer theirs.Close()
	ours := os.NewFile(uintptr(fds[0]), "agent-stream")
	conn, err := net.FileConn(ours)
	_ = ours.Close()
	if err != nil {
		return nil, fmt.Errorf("agent stream: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("log pipe: %w", err)
	}
	defer pw.Close()
	netMode := "none"
	if s.bundle.netns != "" {
		netMode = "sandbox"
	}
	args := append(s.rt.runscArgs(rootOverlay(s.spec, s.bundle.dir)), "--network", netMode)
	if image == "" {
		args = append(args, "run", "--bundle", s.bundle.dir, s.spec.ID)
	} else {
		args = append(args, "restore", "--image-path", image, "--bundle", s.bundle.dir, s.spec.ID)
	}
	cmd := exec.Command(s.rt.cfg.RunscPath, args...)
	cmd.Env = []string{}
	cmd.Stdin = theirs
	cmd.Stdout, cmd.Stderr = pw, pw
	// runsc stays the parent of the container; if the worker dies it
	// is killed, and New's sweep deletes what it leaves.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = conn.Close()
		_ = pr.Close()
		return nil, fmt.Errorf("start runsc: %w", err)
	}
	s.run = cmd
	s.output = &logWriter{log: s.log}
	s.exited, s.logs = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.logs)
		defer pr.Close()
		_, _ = io.Copy(s.output, pr)
	}()
	go func() {
		err := cmd.Wait()
		s.log.Debug("runsc exited", "err", err)
		close(s.exited)
	}()
	return conn, nil
}

// globalArgs are the runsc flags of every command on this runtime's
// containers but the one that starts or restores a sandbox, which adds
// its root's overlay (see rootOverlay).
func (r *Runtime) globalArgs() []string { return r.runscArgs("none") }

// runscArgs are the runsc flags with overlay as --overlay2.
func (r *Runtime) runscArgs(overlay string) []string {
	args := []string{
		"--root", r.cfg.runscRoot(),
		"--platform", r.cfg.Platform,
		"--overlay2", overlay,
	}
	if r.cfg.DebugLogDir != "" {
		args = append(args, "--debug", "--debug-log", r.cfg.DebugLogDir+"/")
	}
	return args
}

// Exec implements sandbox.Sandbox. The process runs as the spec's uid and
// gid, in the workspace unless req.Cwd says otherwise.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	if s.client == nil {
		return sandbox.ExitStatus{}, fmt.Errorf("%w: sandbox %s has no agent", sandbox.ErrGuestRuntime, s.spec.ID)
	}
	if req.Cwd == "" {
		req.Cwd = s.spec.Workspace
	}
	return s.client.Exec(ctx, req, s.spec.UID, s.spec.GID)
}

// Stats implements sandbox.Sandbox from the container's host cgroup (see
// cgroupStats).
func (s *Sandbox) Stats() sandbox.Stats { return s.cg.stats() }

// Destroy implements sandbox.Sandbox: `runsc delete --force` kills the
// container and its sandbox; then runsc run is waited for, the root
// unmounted and the bundle removed.
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.destroyOnce.Do(func() { s.destroyErr = s.destroy(ctx) })
	return s.destroyErr
}

func (s *Sandbox) destroy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, destroyTimeout)
	defer cancel()
	var errs []error
	if s.run != nil {
		if err := s.rt.deleteContainer(ctx, s.spec.ID); err != nil {
			errs = append(errs, err)
		}
		select {
		case <-s.exited:
		case <-ctx.Done():
			_ = s.run.Process.Kill()
			errs = append(errs, fmt.Errorf("wait for runsc run: %w", ctx.Err()))
		}
	}
	if s.client != nil {
		_ = s.client.Close()
	}
	if s.logs != nil {
		select {
		case <-s.logs:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("drain container output: %w", ctx.Err()))
		}
	}
	if s.link != nil {
		if err := s.link.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.bundle.remove(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", s.spec.ID, err)
	}
	return nil
}

// deleteContainer runs `runsc delete --force id`; a container runsc does
// not know is already gone.
func (r *Runtime) deleteContainer(ctx context.Context, id string) error {
	args := append(r.globalArgs(), "delete", "--force", id)
	out, err := exec.CommandContext(ctx, r.cfg.RunscPath, args...).CombinedOutput()
	if err != nil && !r.containerGone(ctx, id) {
		return fmt.Errorf("runsc delete %s: %w: %s", id, err, out)
	}
	return nil
}

// containerGone reports whether runsc has no state for id.
func (r *Runtime) containerGone(ctx context.Context, id string) bool {
	args := append(r.globalArgs(), "state", id)
	return exec.CommandContext(ctx, r.cfg.RunscPath, args...).Run() != nil
}

// sweep deletes the containers and bundles a previous worker with this
// StateDir left behind.
func (r *Runtime) sweep(ctx context.Context) {
	entries, err := os.ReadDir(r.cfg.bundles())
	if err != nil {
		r.log.Warn("sweep stale sandboxes", "err", err)
		return
	}
	for _, e := range entries {
		id := e.Name()
		ctx, cancel := context.WithTimeout(ctx, destroyTimeout)
		if err := r.deleteContainer(ctx, id); err != nil {
			r.log.Warn("delete stale sandbox", "sandbox_id", id, "err", err)
		}
		cancel()
		b := bundle{dir: filepath.Join(r.cfg.bundles(), id)}
		if err := b.remove(); err != nil {
			r.log.Warn("remove stale bundle", "sandbox_id", id, "err", err)
		}
	}
}

// Close implements the worker's runtime closer: once the worker's
// sandboxes are gone, it unmounts the network namespace runsc leaves
// mounted in its root for sandboxes without a network (null-netns), so
// that a stopped worker leaves no mount behind. runsc makes it again
// for the next such sandbox.
func (r *Runtime) Close(context.Context) error {
	p := filepath.Join(r.cfg.runscRoot(), "null-netns")
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("gvisor tier: unmount %s: %w", p, err)
	}
	return nil
}

// logWriter turns the container's output into log records, one per line,
// and keeps the last few for error messages.
type logWriter struct {
	log  *slog.Logger
	line []byte

	mu   sync.Mutex
	tail []string
}

// lastLog is the container's and runsc's last output lines.
func (s *Sandbox) lastLog() string {
	if s.output == nil {
		return ""
	}
	s.output.mu.Lock()
	defer s.output.mu.Unlock()
	return strings.Join(s.output.tail, "; ")
}

func (w *logWriter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b != '\n' {
			if len(w.line) < 16<<10 {
				w.line = append(w.line, b)
			}
			continue
		}
		w.log.Info("agent", "line", string(w.line))
		w.mu.Lock()
		w.tail = append(w.tail, string(w.line))
		if len(w.tail) > 5 {
			w.tail = w.tail[1:]
		}
		w.mu.Unlock()
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
// open without a Cwd starts in the workspace. Sessions survive a
// checkpoint and restore with all their state (gVisor saves the agent, the
// terminals and the shells with the rest of the sandbox); a request in
// flight when the checkpoint is taken fails with sandbox.ErrCheckpointed.
func (s *Sandbox) Shell(ctx context.Context, req sandbox.ShellRequest) (sandbox.ShellResult, error) {
	if s.client == nil {
		return sandbox.ShellResult{}, fmt.Errorf("%w: sandbox %s has no agent", sandbox.ErrGuestRuntime, s.spec.ID)
	}
	if req.Op == sandbox.ShellOpen && req.Cwd == "" {
		req.Cwd = s.spec.Workspace
	}
	return s.client.Shell(ctx, req)
}
