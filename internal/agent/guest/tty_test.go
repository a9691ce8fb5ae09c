package guest

import (
	"context"
	"io"
	"os"
	osexec "os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/testenv"
)

// ttyRun is a terminal exec under test: what it printed so far, a way to
// type into it, and its sender once it started.
type ttyRun struct {
	mu     sync.Mutex
	out    strings.Builder
	typeW  *io.PipeWriter
	sender chan sandbox.Sender
	done   chan struct{}
	st     sandbox.ExitStatus
	err    error
}

func startTTY(t *testing.T, argv []string, size sandbox.WinSize) *ttyRun {
	t.Helper()
	c := newPair(t)
	r, w := io.Pipe()
	run := &ttyRun{typeW: w, sender: make(chan sandbox.Sender, 1), done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(func() {
		cancel()
		_ = w.Close()
		<-run.done
	})
	go func() {
		defer close(run.done)
		run.st, run.err = c.Exec(ctx, sandbox.ExecRequest{
			Argv: argv, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TERM=xterm-256color", "HOME=" + t.TempDir()},
			Cwd: "/", Stdin: r, TTY: &size,
			OnOutput: func(stream string, data []byte) {
				run.mu.Lock()
				defer run.mu.Unlock()
				if stream != "stdout" {
					run.out.WriteString("[" + stream + "]")
				}
				run.out.Write(data)
			},
			Started: func(s sandbox.Sender) { run.sender <- s },
		}, uint32(os.Getuid()), uint32(os.Getgid()))
	}()
	return run
}

func (r *ttyRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// waitFor polls the output until it holds want (after skipping from
// bytes), and returns the offset past it.
func (r *ttyRun) waitFor(t *testing.T, from int, want string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		out := r.output()
		if i := strings.Index(out[from:], want); i >= 0 {
			return from + i + len(want)
		}
		select {
		case <-r.done:
			t.Fatalf("the terminal exited (%+v, %v) before printing %q; output: %q", r.st, r.err, want, r.output())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("output lacks %q after 20 s: %q", want, r.output())
	return 0
}

func (r *ttyRun) typeIn(t *testing.T, s string) {
	t.Helper()
	if _, err := r.typeW.Write([]byte(s)); err != nil {
		t.Fatalf("type %q: %v", s, err)
	}
}

func TestTTYExecEchoesResizesExits(t *testing.T) {
	bash, err := osexec.LookPath("bash")
	testenv.Require(t, err == nil, "no bash on this host")
	run := startTTY(t, []string{bash, "--norc", "--noprofile", "-i"}, sandbox.WinSize{Rows: 24, Cols: 80})
	var s sandbox.Sender
	select {
	case s = <-run.sender:
	case <-run.done:
		t.Fatalf("Exec() = %+v, %v before it started", run.st, run.err)
	}
	rs, ok := s.(sandbox.Resizer)
	if !ok {
		t.Fatalf("the sender of a terminal exec is %T, not a sandbox.Resizer", s)
	}
	// Echo: what is typed shows before it runs (the terminal's default
	// modes), and stdin, stdout and stderr are the terminal.
	run.typeIn(t, "PS1='$ '; echo 'he''llo'; tty; stty size; echo oops >&2\r")
	at := run.waitFor(t, 0, "echo 'he''llo'")
	at = run.waitFor(t, at, "hello\r\n") // "\r\n" in the output: ONLCR
	at = run.waitFor(t, at, "/dev/pts/")
	at = run.waitFor(t, at, "24 80")
	at = run.waitFor(t, at, "oops")
	if strings.Contains(run.output(), "[stderr]") {
		t.Errorf("a terminal exec sent stderr output: %q", run.output())
	}

	// Resize: the shell sees the new size.
	if err := rs.Resize(sandbox.WinSize{Rows: 30, Cols: 100}); err != nil {
		t.Fatalf("Resize(30x100) = %v", err)
	}
	run.typeIn(t, "stty size\r")
	at = run.waitFor(t, at, "30 100")
	if err := rs.Resize(sandbox.WinSize{Rows: 0, Cols: 100}); err == nil {
		t.Errorf("Resize(0x100) = nil, want an error")
	}

	// ^C reaches the foreground job, not the shell.
	run.typeIn(t, "sleep 100\r")
	at = run.waitFor(t, at, "sleep 100")
	run.typeIn(t, "\x03")
	run.typeIn(t, "echo after-$((6*7))\r")
	run.waitFor(t, at, "after-42")

	run.typeIn(t, "exit 3\r")
	select {
	case <-run.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the shell did not exit; output: %q", run.output())
	}
	if run.err != nil || run.st.Code != 3 {
		t.Errorf("Exec() = %+v, %v, want exit code 3", run.st, run.err)
	}
}

func TestTTYExecEndsWithoutInput(t *testing.T) {
	run := startTTY(t, []string{"/bin/sh", "-c", "stty size; test -t 0 && test -t 1 && test -t 2 && echo all-tty"}, sandbox.WinSize{Rows: 7, Cols: 33})
	_ = run.typeW.Close() // the end of stdin closes nothing on a terminal
	select {
	case <-run.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the command did not exit; output: %q", run.output())
	}
	if run.err != nil || run.st.Code != 0 {
		t.Fatalf("Exec() = %+v, %v, want exit 0; output %q", run.st, run.err, run.output())
	}
	if out := run.output(); !strings.Contains(out, "7 33") || !strings.Contains(out, "all-tty") {
		t.Errorf("output = %q, want the size 7 33 and all-tty", out)
	}
}

func TestTTYExecRefusesBadSize(t *testing.T) {
	c := newPair(t)
	_, err := c.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"/bin/true"}, TTY: &sandbox.WinSize{Rows: 0, Cols: 80}}, 0, 0)
	if err == nil {
		t.Fatalf("Exec(tty 80x0) = nil, want an error")
	}
}
