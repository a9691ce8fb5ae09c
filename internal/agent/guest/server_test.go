package guest

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/agent"
	"github.com/helmr/helmr/internal/sandbox"
)

// newPair serves a Server on one end of a socket pair and returns a ready
// Client on the other; processes run as the test's own uid, without any
// namespace.
func newPair(t *testing.T) *agent.Client {
	t.Helper()
	return newPairWith(t, nil)
}

// newPairWith is newPair with setup applied to the server first.
func newPairWith(t *testing.T, setup func(*Server)) *agent.Client {
	t.Helper()
	a, b := net.Pipe()
	if ua, ub, err := unixPair(); err == nil {
		a, b = ua, ub
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reaper := NewReaper(log)
	served := make(chan error, 1)
	srv := NewServer(b, reaper, log)
	if setup != nil {
		setup(srv)
	}
	go func() { served <- serve(srv) }()
	c := agent.NewClient(a, log)
	t.Cleanup(func() {
		c.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve() = %v, want nil", err)
		}
		reaper.Stop()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if v, err := c.WaitReady(ctx); err != nil || v != agent.Version {
		t.Fatalf("WaitReady() = %q, %v, want %q", v, err, agent.Version)
	}
	return c
}

func unixPair() (net.Conn, net.Conn, error) {
	ours, theirs, err := socketPair()
	if err != nil {
		return nil, nil, err
	}
	defer ours.Close()
	defer theirs.Close()
	a, err := net.FileConn(ours)
	if err != nil {
		return nil, nil, err
	}
	b, err := net.FileConn(theirs)
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

func exec(t *testing.T, c *agent.Client, req sandbox.ExecRequest) (stdout, stderr string, st sandbox.ExitStatus, err error) {
	t.Helper()
	var o, e strings.Builder
	req.OnOutput = func(stream string, data []byte) {
		if stream == agent.Stdout {
			o.Write(data)
		} else {
			e.Write(data)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err = c.Exec(ctx, req, uint32(os.Getuid()), uint32(os.Getgid()))
	return o.String(), e.String(), st, err
}

func TestExecOutputAndExit(t *testing.T) {
	c := newPair(t)
	out, errOut, st, err := exec(t, c, sandbox.ExecRequest{
		Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"},
		Env:  []string{"PATH=/usr/bin:/bin"},
	})
	if err != nil || st.Code != 3 || out != "out\n" || errOut != "err\n" {
		t.Errorf("Exec(sh) = %q, %q, %+v, %v; want out, err, code 3", out, errOut, st, err)
	}
}

func TestExecStdin(t *testing.T) {
	c := newPair(t)
	out, _, st, err := exec(t, c, sandbox.ExecRequest{Argv: []string{"/bin/cat"}, Stdin: strings.NewReader("hello\n")})
	if err != nil || st.Code != 0 || out != "hello\n" {
		t.Errorf("Exec(cat) = %q, %+v, %v; want hello", out, st, err)
	}
}

func TestExecNotFound(t *testing.T) {
	c := newPair(t)
	_, _, st, err := exec(t, c, sandbox.ExecRequest{Argv: []string{"no-such-binary-x"}})
	if !errors.Is(err, sandbox.ErrExecStart) || st.Code != 127 || !strings.Contains(err.Error(), "no-such-binary-x") {
		t.Errorf("Exec(missing) = %+v, %v; want code 127 and ErrExecStart naming the binary", st, err)
	}
}

func TestExecChannel(t *testing.T) {
	c := newPair(t)
	var got []string
	req := sandbox.ExecRequest{
		Argv:      []string{"/bin/sh", "-c", `echo '{"hello":1}' >&3; read -r l <&3; echo "{\"got\":$l}" >&3`},
		Channel:   true,
		OnMessage: func(m []byte) { got = append(got, string(m)) },
	}
	req.Started = func(s sandbox.Sender) {
		if err := s.Send([]byte(`{"n":41}`)); err != nil {
			t.Errorf("Send() = %v", err)
		}
	}
	_, _, st, err := exec(t, c, req)
	want := []string{`{"hello":1}`, `{"got":{"n":41}}`}
	if err != nil || st.Code != 0 || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Exec(channel) = %v, %+v, %v; want %v", got, st, err, want)
	}
}

func TestExecCancel(t *testing.T) {
	c := newPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	st, err := c.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sleep", "30"}}, uint32(os.Getuid()), uint32(os.Getgid()))
	if !errors.Is(err, context.DeadlineExceeded) || st.Signal != "killed" || time.Since(start) > 5*time.Second {
		t.Errorf("Exec(sleep, cancelled) = %+v, %v after %v; want killed, DeadlineExceeded", st, err, time.Since(start))
	}
}

func TestReadLinesDropsLongLines(t *testing.T) {
	var got []string
	err := readLines(strings.NewReader("a\n"+strings.Repeat("x", 100)+"\nb"), 10, func(l []byte) { got = append(got, string(l)) })
	if err != nil || strings.Join(got, ",") != "a,b" {
		t.Errorf("readLines() = %q, %v; want a,b", got, err)
	}
}

func TestInitRejectsNonInit(t *testing.T) {
	a, b, err := unixPair()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	done := make(chan error, 1)
	go func() { done <- RunInit(b, nil, log) }()
	// A worker that sends exec before init gets fatal, as a guest
	// runtime error carrying the agent's message.
	if err := agent.NewWriter(a).Send(&agent.Exec{ID: 1, Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	c := agent.NewClient(a, log)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.WaitReady(ctx)
	if !errors.Is(err, sandbox.ErrGuestRuntime) || !strings.Contains(err.Error(), "want init") {
		t.Errorf("WaitReady() after exec-before-init = %v, want ErrGuestRuntime saying it wanted init", err)
	}
	if err := <-done; err == nil {
		t.Errorf("RunInit() = nil, want an error")
	}
	b.Close()
}

func TestResolveFDs(t *testing.T) {
	cfg := &agent.Init{WorkspaceSource: "fd:0", HelmrSource: "/opt", RootLayers: []string{"fd:2", "/layer", "fd:1"}}
	if err := resolveFDs(cfg, []int{10, 11, 12}); err != nil {
		t.Fatalf("resolveFDs() = %v", err)
	}
	got := append([]string{cfg.WorkspaceSource, cfg.HelmrSource}, cfg.RootLayers...)
	want := []string{"fd:10", "/opt", "fd:12", "/layer", "fd:11"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("resolveFDs() refs = %q, want %q", got, want)
	}
	for _, ref := range []string{"fd:3", "fd:-1", "fd:x"} {
		if err := resolveFDs(&agent.Init{WorkspaceSource: ref}, []int{10, 11, 12}); err == nil {
			t.Errorf("resolveFDs(%q with 3 fds) = nil, want an error", ref)
		}
	}
}
