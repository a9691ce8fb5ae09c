package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/agent"
	"github.com/helmr/helmr/internal/sandbox"
)

// shellClient is a client whose agent keeps its session files in a
// temporary directory; its sessions run as the test's own user.
type shellClient struct {
	c    *agent.Client
	root string
}

func newShellPair(t *testing.T) *shellClient {
	t.Helper()
	root := t.TempDir()
	return &shellClient{c: newPairWith(t, func(s *Server) { s.shellRoot = root }), root: root}
}

func (sc *shellClient) do(t *testing.T, req sandbox.ShellRequest) (sandbox.ShellResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return sc.c.Shell(ctx, req)
}

func (sc *shellClient) open(t *testing.T, name string, startup ...string) sandbox.ShellResult {
	t.Helper()
	res, err := sc.do(t, sandbox.ShellRequest{
		Op: sandbox.ShellOpen, Name: name, Cwd: "/", UID: uint32(os.Getuid()), GID: uint32(os.Getgid()),
		Env:           []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir()},
		StartupSource: startup,
	})
	if err != nil || res.TimedOut {
		t.Fatalf("Shell(open %s) = %+v, %v", name, res, err)
	}
	return res
}

func (sc *shellClient) run(t *testing.T, name, command string) sandbox.ShellResult {
	t.Helper()
	res, err := sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: name, Command: command, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("Shell(run %q) = %v", command, err)
	}
	return res
}

func TestShellKeepsState(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	setup := `x=unexported; f() { echo "fn $1"; }; alias ll='echo aliased'
cd /tmp; cd /; set -o noclobber`
	if res := sc.run(t, "s", setup); res.ExitCode != 0 || len(res.Output) != 0 {
		t.Fatalf("run(setup) = %q, %d; want no output, 0", res.Output, res.ExitCode)
	}
	res := sc.run(t, "s", "echo $x; f a\nll\ncd -\nset -o | grep noclobber")
	want := "unexported\nfn a\naliased\n/tmp\nnoclobber      \ton\n"
	if string(res.Output) != want || res.ExitCode != 0 {
		t.Errorf("run(use state) = %q, %d; want %q, 0", res.Output, res.ExitCode, want)
	}
}

func TestShellExitCodeAfterBigOutput(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	res := sc.run(t, "s", "seq 1 300000; false")
	if res.ExitCode != 1 || res.OutputCut == 0 || len(res.Output) != defaultShellOutput {
		t.Errorf("run(seq; false) = code %d, %d bytes, cut %d; want 1, %d bytes, cut > 0",
			res.ExitCode, len(res.Output), res.OutputCut, defaultShellOutput)
	}
	if !strings.HasPrefix(string(res.Output), "1\n2\n3\n") {
		t.Errorf("run(seq) output starts %q, want 1\\n2\\n3\\n", res.Output[:min(20, len(res.Output))])
	}
	// Every byte is counted: seq 1 300000 prints 1988895 bytes.
	if got := int64(len(res.Output)) + res.OutputCut; got != 1988895 {
		t.Errorf("output + cut = %d, want 1988895", got)
	}
	if res := sc.run(t, "s", "echo next"); string(res.Output) != "next\n" {
		t.Errorf("run(echo next) = %q, want next", res.Output)
	}
}

func TestShellSyntaxError(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	res := sc.run(t, "s", "echo ok; )")
	if !res.SyntaxError || res.ExitCode != 2 || !strings.Contains(res.SyntaxStderr, "bash: line 1: syntax error near unexpected token `)'") {
		t.Errorf("run(bad syntax) = %+v; want SyntaxError, 2 and bash's message", res)
	}
	if len(res.Output) != 0 {
		t.Errorf("run(bad syntax) output %q, want none (it did not run)", res.Output)
	}
}

func TestShellUnterminatedHeredoc(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	res := sc.run(t, "s", "cat <<EOF\nhello\nworld")
	want := "bash: warning: here-document at line 1 delimited by end-of-file (wanted `EOF')\nhello\nworld\n"
	if string(res.Output) != want || res.ExitCode != 0 {
		t.Errorf("run(unterminated heredoc) = %q, %d; want %q, 0", res.Output, res.ExitCode, want)
	}
	if res := sc.run(t, "s", "echo after"); string(res.Output) != "after\n" {
		t.Errorf("run after heredoc = %q, want after", res.Output)
	}
}

func TestShellErrorsReadAsTyped(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	res := sc.run(t, "s", "no-such-command-x")
	if want := "bash: no-such-command-x: command not found\n"; string(res.Output) != want || res.ExitCode != 127 {
		t.Errorf("run(missing command) = %q, %d; want %q, 127", res.Output, res.ExitCode, want)
	}
}

func TestShellHidesPlumbing(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	sc.run(t, "s", "set -x")
	res := sc.run(t, "s", "echo traced")
	sc.run(t, "s", "set +x")
	if got := string(res.Output); !strings.Contains(got, "echo traced") || strings.Contains(got, "source") || strings.Contains(got, "PS1") {
		t.Errorf("run under set -x = %q; want the command's trace without the agent's", got)
	}
	res = sc.run(t, "s", "stty echo; echo one")
	res2 := sc.run(t, "s", "echo two")
	if string(res.Output) != "one\n" || string(res2.Output) != "two\n" {
		t.Errorf("runs after stty echo = %q, %q; want one, two (typed lines not shown)", res.Output, res2.Output)
	}
	res = sc.run(t, "s", `printf '\033[1;31mred\033[0m\r\n'; printf 'a\r\nb\rc\n'`)
	// The terminal makes "\n" "\r\n", so "\r\n" arrives as "\r\r\n":
	// one "\r" stays, as in SWE-ReX.
	if want := "red\r\na\r\nb\rc\n"; string(res.Output) != want {
		t.Errorf("run(escapes) = %q, want %q", res.Output, want)
	}
}

func TestShellPS1Reasserted(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	sc.run(t, "s", "PS1='$ '")
	if res := sc.run(t, "s", "echo still"); string(res.Output) != "still\n" {
		t.Errorf("run after PS1 change = %q, want still", res.Output)
	}
}

func TestShellTimeoutInterrupt(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	res, err := sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: "s", Command: "echo started; sleep 60", Timeout: 500 * time.Millisecond})
	if err != nil || !res.TimedOut || string(res.Output) != "started\n" {
		t.Fatalf("run(sleep 60, 500ms) = %+v, %v; want TimedOut with started", res, err)
	}
	res, err = sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellInterrupt, Name: "s", Timeout: 2 * time.Second})
	if err != nil || res.TimedOut || res.ExitCode != 130 {
		t.Fatalf("interrupt = %+v, %v; want the shell back, status 130", res, err)
	}
	if res := sc.run(t, "s", "echo back"); string(res.Output) != "back\n" || res.ExitCode != 0 {
		t.Errorf("run after interrupt = %q, %d; want back, 0", res.Output, res.ExitCode)
	}
}

func TestShellInterruptFallsBackToKill(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	// The job ignores SIGINT: ^C cannot end it, ^Z and the kill do.
	res, err := sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: "s", Command: "sh -c 'trap \"\" INT; sleep 60'", Timeout: 300 * time.Millisecond})
	if err != nil || !res.TimedOut {
		t.Fatalf("run(sleep ignoring INT) = %+v, %v; want TimedOut", res, err)
	}
	res, err = sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellInterrupt, Name: "s", Timeout: 300 * time.Millisecond, Retries: 2})
	if err != nil || res.TimedOut {
		t.Fatalf("interrupt = %+v, %v; want the shell back", res, err)
	}
	// bash reports the killed job before its next prompt.
	if res := sc.run(t, "s", "echo back"); !strings.HasPrefix(string(res.Output), "back\n") || res.ExitCode != 0 {
		t.Errorf("run after interrupt = %q, %d; want back, 0", res.Output, res.ExitCode)
	}
}

func TestShellLaterRunWaits(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	res, err := sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: "s", Command: "sleep 0.5; echo first; false", Timeout: 50 * time.Millisecond})
	if err != nil || !res.TimedOut {
		t.Fatalf("run(sleep) = %+v, %v; want TimedOut", res, err)
	}
	// The next run waits for the first command; its answer starts with
	// what the first printed after its run gave up, and has its own status.
	res = sc.run(t, "s", "echo second")
	if string(res.Output) != "first\nsecond\n" || res.ExitCode != 0 {
		t.Errorf("run(second) = %q, %d; want first, second and 0", res.Output, res.ExitCode)
	}
}

func TestShellExit(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	res := sc.run(t, "s", "echo bye; exit 3")
	if !res.Exited || res.ExitCode != 3 || !strings.HasPrefix(string(res.Output), "bye\n") {
		t.Errorf("run(exit 3) = %+v; want Exited, 3, bye", res)
	}
	_, err := sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: "s", Command: "true"})
	if !errors.Is(err, sandbox.ErrNoShell) {
		t.Errorf("run after exit = %v, want ErrNoShell", err)
	}
	if ents, _ := os.ReadDir(sc.root); len(ents) != 0 {
		t.Errorf("session files left after exit: %v", ents)
	}
}

func TestShellConcurrentRuns(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	const n = 40
	var wg sync.WaitGroup
	got := make([]sandbox.ShellResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: "s", Command: fmt.Sprintf("echo %d; (exit %d)", i, i), Timeout: 50 * time.Second})
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || string(got[i].Output) != fmt.Sprintf("%d\n", i) || got[i].ExitCode != i {
			t.Errorf("run %d = %q, %d, %v; want %d", i, got[i].Output, got[i].ExitCode, errs[i], i)
		}
	}
}

func TestShellOpenCloseErrors(t *testing.T) {
	sc := newShellPair(t)
	res := sc.open(t, "s", "/no/such/startup")
	if want := "bash: /no/such/startup: No such file or directory\n"; string(res.Output) != want {
		t.Errorf("open(missing startup) output = %q, want %q", res.Output, want)
	}
	if _, err := sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellOpen, Name: "s", Cwd: "/"}); !errors.Is(err, sandbox.ErrShellExists) {
		t.Errorf("open(s) twice = %v, want ErrShellExists", err)
	}
	sc.run(t, "s", "sleep 60 &")
	if _, err := sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellClose, Name: "s"}); err != nil {
		t.Fatalf("close(s) = %v", err)
	}
	for _, op := range []string{sandbox.ShellRun, sandbox.ShellInterrupt, sandbox.ShellClose} {
		if _, err := sc.do(t, sandbox.ShellRequest{Op: op, Name: "s", Command: "true"}); !errors.Is(err, sandbox.ErrNoShell) {
			t.Errorf("%s after close = %v, want ErrNoShell", op, err)
		}
	}
	sc.open(t, "s") // the name is free again
	if _, err := sc.do(t, sandbox.ShellRequest{Op: "bogus", Name: "s"}); err == nil || errors.Is(err, sandbox.ErrGuestRuntime) {
		t.Errorf("Shell(bogus op) = %v, want a request error", err)
	}
}

func TestShellStartupSource(t *testing.T) {
	sc := newShellPair(t)
	rc := t.TempDir() + "/rc"
	if err := os.WriteFile(rc, []byte("echo from rc\nexport FROM_RC=1\nmyfn() { echo myfn; }\nPS1='rc$ '\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := sc.open(t, "s", rc)
	if string(res.Output) != "from rc\n" {
		t.Errorf("open output = %q, want from rc", res.Output)
	}
	if res := sc.run(t, "s", "echo $FROM_RC; myfn"); string(res.Output) != "1\nmyfn\n" {
		t.Errorf("run after startup = %q, want 1, myfn", res.Output)
	}
}

func TestShellOpenTimeoutThenInterrupt(t *testing.T) {
	sc := newShellPair(t)
	rc := t.TempDir() + "/rc"
	if err := os.WriteFile(rc, []byte("echo waiting\nread -r line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellOpen, Name: "s", Cwd: "/", UID: uint32(os.Getuid()), GID: uint32(os.Getgid()),
		Env: []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}, StartupSource: []string{rc}, Timeout: 300 * time.Millisecond})
	if err != nil || !res.TimedOut || string(res.Output) != "waiting\n" {
		t.Fatalf("open(startup reading the terminal) = %+v, %v; want TimedOut with waiting", res, err)
	}
	// The session exists; ^C ends its startup, and the prompt is Helmr's.
	res, err = sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellInterrupt, Name: "s"})
	if err != nil || res.TimedOut {
		t.Fatalf("interrupt during startup = %+v, %v; want the shell back", res, err)
	}
	if res := sc.run(t, "s", "echo ready"); string(res.Output) != "ready\n" || res.ExitCode != 0 {
		t.Errorf("run after the interrupted startup = %q, %d; want ready, 0", res.Output, res.ExitCode)
	}
}

func TestShellIdleInterrupt(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	res, err := sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellInterrupt, Name: "s"})
	if err != nil || res.TimedOut || len(res.Output) != 0 {
		t.Errorf("interrupt of an idle shell = %+v, %v; want an empty answer", res, err)
	}
	if res := sc.run(t, "s", "false"); res.ExitCode != 1 {
		t.Errorf("run(false) after idle interrupt = %d, want 1", res.ExitCode)
	}
}

func TestShellQueuedRunThatGaveUpStillRuns(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	started := t.TempDir() + "/started"
	first := make(chan sandbox.ShellResult, 1)
	go func() {
		res, _ := sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: "s", Command: "touch " + started + "; sleep 0.5; echo one", Timeout: 10 * time.Second})
		first <- res
	}()
	deadline := time.Now().Add(10 * time.Second)
	for _, err := os.Stat(started); err != nil; _, err = os.Stat(started) {
		if time.Now().After(deadline) {
			t.Fatal("the first run did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Queued behind the first, this run gives up before it starts: it
	// still runs (typed-ahead input), and what it prints is pending.
	res, err := sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: "s", Command: "echo two; marker=set", Timeout: time.Millisecond})
	if err != nil || !res.TimedOut || len(res.Output) != 0 {
		t.Fatalf("queued run with 1ms = %+v, %v; want TimedOut, no output", res, err)
	}
	if r := <-first; string(r.Output) != "one\n" {
		t.Errorf("first run = %q, want one", r.Output)
	}
	if r := sc.run(t, "s", "echo $marker"); string(r.Output) != "two\nset\n" {
		t.Errorf("run after = %q; want the queued run's output, then set", r.Output)
	}
}

func TestShellExitWithEscapedProcessHoldingTerminal(t *testing.T) {
	sc := newShellPair(t)
	sc.open(t, "s")
	// A process in a session of its own keeps the terminal open: the
	// shell's exit still ends the session.
	sc.run(t, "s", "setsid sleep 2 &")
	res := sc.run(t, "s", "exit 4")
	if !res.Exited || res.ExitCode != 4 {
		t.Errorf("run(exit 4) = %+v; want Exited, 4", res)
	}
	if _, err := sc.do(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: "s", Command: "true"}); !errors.Is(err, sandbox.ErrNoShell) {
		t.Errorf("run after exit = %v, want ErrNoShell", err)
	}
}
