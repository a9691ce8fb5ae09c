package guest

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent"
)

// RunInit is the process tier's agent. It runs prepare (Prepare; nil to
// skip) while it waits for init, reads the init frame and the descriptors
// sent with it from conn, sets the sandbox up (Setup, Harden), closes the
// descriptors, answers ready (or fatal, then returns the error) and serves
// until the worker closes conn. A failed prepare is reported once init has
// come.
func RunInit(conn io.ReadWriteCloser, prepare func() error, log *slog.Logger) error {
	return runInit(conn, prepare, nil, log)
}

// runInit is RunInit with finish (nil to skip) run after Setup, in the
// sandbox's root, before Harden drops the agent's capabilities.
func runInit(conn io.ReadWriteCloser, prepare, finish func() error, log *slog.Logger) error {
	reaper := NewReaper(log)
	defer reaper.Stop()
	srv := NewServer(conn, reaper, log)
	var prepErr error
	if prepare != nil {
		prepErr = prepare()
	}
	m, fds, err := agent.ReadMsgFDs(conn)
	if err != nil {
		return fmt.Errorf("read init: %w", err)
	}
	err = prepErr
	cfg, ok := m.(*agent.Init)
	if err == nil && !ok {
		err = fmt.Errorf("first message is %s, want init", m.MessageType())
	}
	if err == nil {
		err = resolveFDs(cfg, fds)
	}
	if err == nil {
		err = Setup(cfg, log)
	}
	if err == nil && finish != nil {
		err = finish()
	}
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
	if err == nil {
		err = Harden()
	}
	if err != nil {
		if serr := srv.Writer().Send(&agent.Fatal{Message: err.Error()}); serr != nil {
			log.Error("send fatal", "err", serr)
		}
		return err
	}
	return serve(srv)
}

// RunServe serves conn in a guest its runtime has already set up (gVisor, a
// VM's init): it answers ready at once.
//
// Before it serves, it sets no_new_privs and empties the capability
// bounding and ambient sets (LimitExec, which needs CAP_SETPCAP), so that
// what it starts has no capability, uid 0 included.
func RunServe(conn io.ReadWriteCloser, log *slog.Logger) error {
	keep, err := ParseCaps(os.Getenv(BuildCapsEnv))
	if err != nil {
		return err
	}
	if err := LimitExecKeeping(keep); err != nil {
		return fmt.Errorf("limit what the agent starts: %w", err)
	}
	reaper := NewReaper(log)
	defer reaper.Stop()
	srv := NewServer(conn, reaper, log)
	if v := os.Getenv(ChildNprocEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%s=%q: not a number", ChildNprocEnv, v)
		}
		if err := srv.SetChildNproc(n); err != nil {
			return err
		}
	}
	return serve(srv)
}

func serve(srv *Server) error {
	if err := srv.Writer().Send(&agent.Ready{Version: agent.Version, Binary: true}); err != nil {
		return fmt.Errorf("send ready: %w", err)
	}
	return srv.Serve()
}

// shieldedSignals would end a Go program by default. As PID 1 of a pid
// namespace the agent is sent them only by sandbox processes that share its
// uid, and must survive them; handled (rather than ignored) signals are
// reset to their defaults in the processes it starts.
var shieldedSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGTERM, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGALRM, unix.SIGVTALRM, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGPWR, unix.SIGSTKFLT,
	unix.SIGABRT, unix.SIGTRAP,
}

// ShieldSignals logs and drops shieldedSignals until stop is called.
func ShieldSignals(log *slog.Logger) (stop func()) {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, shieldedSignals...)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case sig := <-ch:
				log.Warn("ignoring signal", "signal", sig.String())
			case <-quit:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(quit)
		<-done
	}
}
