package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
)

// testShells is the shell session contract (sandbox.Shells), for a tier
// whose sandboxes hold sessions: a real bash per session that keeps its
// state between commands, an exit code that never depends on the output,
// syntax errors found before running, interrupts, serialized concurrent
// runs, exit and close.
func testShells(t *testing.T, rt sandbox.Runtime, rootfs string) {
	f := start(t, rt, rootfs, nil)
	if _, ok := f.SB.(sandbox.Shells); !ok {
		t.Skipf("the %s tier has no shell sessions (no sandbox.Shells)", rt.Name())
	}
	t.Run("Identity", func(t *testing.T) { shellIdentity(t, f) })
	t.Run("State", func(t *testing.T) { shellState(t, f) })
	t.Run("ExitCodeAfterBigOutput", func(t *testing.T) { shellBigOutput(t, f) })
	t.Run("SyntaxError", func(t *testing.T) { shellSyntaxError(t, f) })
	t.Run("UnterminatedHeredoc", func(t *testing.T) { shellHeredoc(t, f) })
	t.Run("TimeoutInterrupt", func(t *testing.T) { shellTimeoutInterrupt(t, f) })
	t.Run("Exit", func(t *testing.T) { shellExit(t, f) })
	t.Run("Concurrent", func(t *testing.T) { shellConcurrent(t, f) })
	t.Run("Close", func(t *testing.T) { shellClose(t, f) })
	t.Run("Checkpoint", func(t *testing.T) { shellCheckpoint(t, rt, rootfs) })
}

// Shell sends req to the fixture's sandbox with a time limit.
func (f *fixture) Shell(t *testing.T, req sandbox.ShellRequest) (sandbox.ShellResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), execLimit)
	defer cancel()
	return f.SB.(sandbox.Shells).Shell(ctx, req)
}

// OpenShell opens session name as the sandbox's user, in the workspace.
func (f *fixture) OpenShell(t *testing.T, name string, startup ...string) sandbox.ShellResult {
	t.Helper()
	res, err := f.Shell(t, sandbox.ShellRequest{
		Op: sandbox.ShellOpen, Name: name, UID: f.Spec.UID, GID: f.Spec.GID, StartupSource: startup,
		Env: []string{"PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin", "HOME=/tmp"},
	})
	if err != nil || res.TimedOut {
		t.Fatalf("Shell(open %s) = %+v, %v", name, res, err)
	}
	t.Cleanup(func() { _, _ = f.Shell(t, sandbox.ShellRequest{Op: sandbox.ShellClose, Name: name}) })
	return res
}

// Run runs command in session name (30 s at most) and fails the test if
// the request fails.
func (f *fixture) Run(t *testing.T, name, command string) sandbox.ShellResult {
	t.Helper()
	res, err := f.Shell(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: name, Command: command, Timeout: 30 * time.Second})
	if err != nil || res.TimedOut {
		t.Fatalf("Shell(run %q) = %+v, %v", command, res, err)
	}
	return res
}

func shellIdentity(t *testing.T, f *fixture) {
	f.OpenShell(t, "id")
	res := f.Run(t, "id", `echo "$(id -u):$(id -g) $PWD $(tty)"; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; test -w /run/helmr-shells || echo private`)
	want := fmt.Sprintf("%d:%d %s /dev/pts/", f.Spec.UID, f.Spec.GID, f.Spec.Workspace)
	if got := string(res.Output); !strings.HasPrefix(got, want) || !strings.Contains(got, "CapEff:\t0000000000000000\n") ||
		!strings.Contains(got, "NoNewPrivs:\t1\n") || !strings.HasSuffix(got, "private\n") {
		t.Errorf("shell identity = %q; want %q..., no capabilities, no_new_privs, session files private", got, want)
	}
}

func shellState(t *testing.T, f *fixture) {
	f.OpenShell(t, "state")
	setup := "x=unexported; f() { echo \"fn $1\"; }; alias ll='echo aliased'\ncd /tmp; cd /; set -o noclobber"
	if res := f.Run(t, "state", setup); res.ExitCode != 0 || len(res.Output) != 0 {
		t.Fatalf("run(setup) = %q, %d; want no output, 0", res.Output, res.ExitCode)
	}
	res := f.Run(t, "state", "echo $x; f a\nll\ncd -\nset -o | grep noclobber; env | grep -c '^x=' || true")
	want := "unexported\nfn a\naliased\n/tmp\nnoclobber      \ton\n0\n"
	if string(res.Output) != want || res.ExitCode != 0 {
		t.Errorf("run(use state) = %q, %d; want %q, 0", res.Output, res.ExitCode, want)
	}
	res = f.Run(t, "state", "sleep 0.1 & wait %1; echo waited $?")
	if !strings.HasSuffix(string(res.Output), "waited 0\n") {
		t.Errorf("run(background job, wait) = %q, want waited 0", res.Output)
	}
}

func shellBigOutput(t *testing.T, f *fixture) {
	f.OpenShell(t, "big")
	// 1.2 MB and more: seq 1 200000 prints 1288895 bytes.
	res := f.Run(t, "big", "seq 1 200000; false")
	if res.ExitCode != 1 || res.OutputCut == 0 || int64(len(res.Output))+res.OutputCut != 1288895 {
		t.Errorf("run(seq 1 200000; false) = code %d, %d bytes + %d cut; want 1, 1288895 bytes in all, some cut",
			res.ExitCode, len(res.Output), res.OutputCut)
	}
	if res := f.Run(t, "big", "pwd"); string(res.Output) != f.Spec.Workspace+"\n" {
		t.Errorf("run(pwd) after big output = %q, want the workspace", res.Output)
	}
}

func shellSyntaxError(t *testing.T, f *fixture) {
	f.OpenShell(t, "syntax")
	res, err := f.Shell(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: "syntax", Command: "touch ran; if then fi"})
	if err != nil || !res.SyntaxError || res.ExitCode != 2 ||
		!strings.Contains(res.SyntaxStderr, "bash: line 1: syntax error near unexpected token `then'") {
		t.Errorf("run(bad syntax) = %+v, %v; want SyntaxError, 2 and bash's message", res, err)
	}
	if r := f.Exec(t, "test", "-e", "ran"); r.Status.Code == 0 {
		t.Errorf("a command with a syntax error ran")
	}
}

func shellHeredoc(t *testing.T, f *fixture) {
	f.OpenShell(t, "heredoc")
	res := f.Run(t, "heredoc", "cat <<EOF\nhello")
	want := "bash: warning: here-document at line 1 delimited by end-of-file (wanted `EOF')\nhello\n"
	if string(res.Output) != want || res.ExitCode != 0 {
		t.Errorf("run(unterminated heredoc) = %q, %d; want %q, 0", res.Output, res.ExitCode, want)
	}
	if res := f.Run(t, "heredoc", "echo after"); string(res.Output) != "after\n" {
		t.Errorf("run after the heredoc = %q, want after", res.Output)
	}
}

func shellTimeoutInterrupt(t *testing.T, f *fixture) {
	f.OpenShell(t, "intr")
	res, err := f.Shell(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: "intr", Command: "echo started; sleep 60; echo never", Timeout: time.Second})
	if err != nil || !res.TimedOut || string(res.Output) != "started\n" {
		t.Fatalf("run(sleep 60) with 1s = %+v, %v; want TimedOut with started", res, err)
	}
	res, err = f.Shell(t, sandbox.ShellRequest{Op: sandbox.ShellInterrupt, Name: "intr", Timeout: 5 * time.Second})
	if err != nil || res.TimedOut || res.ExitCode != 130 {
		t.Fatalf("interrupt = %+v, %v; want the shell back (status 130)", res, err)
	}
	if res := f.Run(t, "intr", "echo back"); string(res.Output) != "back\n" || res.ExitCode != 0 {
		t.Errorf("run after interrupt = %q, %d; want back, 0", res.Output, res.ExitCode)
	}
}

func shellExit(t *testing.T, f *fixture) {
	f.OpenShell(t, "exit")
	res := f.Run(t, "exit", "exit 3")
	if !res.Exited || res.ExitCode != 3 {
		t.Errorf("run(exit 3) = %+v; want Exited with 3", res)
	}
	if _, err := f.Shell(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: "exit", Command: "true"}); !errors.Is(err, sandbox.ErrNoShell) {
		t.Errorf("run after exit = %v, want ErrNoShell", err)
	}
}

func shellConcurrent(t *testing.T, f *fixture) {
	f.OpenShell(t, "conc")
	f.Run(t, "conc", "n=0")
	const runs = 40
	var wg sync.WaitGroup
	res := make([]sandbox.ShellResult, runs)
	errs := make([]error, runs)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = f.Shell(t, sandbox.ShellRequest{Op: sandbox.ShellRun, Name: "conc",
				Command: fmt.Sprintf("n=$((n+1)); echo %d; (exit %d)", i, i%7), Timeout: 50 * time.Second})
		}()
	}
	wg.Wait()
	for i := range runs {
		if errs[i] != nil || string(res[i].Output) != fmt.Sprintf("%d\n", i) || res[i].ExitCode != i%7 {
			t.Errorf("concurrent run %d = %q, %d, %v; want %d, exit %d", i, res[i].Output, res[i].ExitCode, errs[i], i, i%7)
		}
	}
	// One after another, in one shell: each saw the one before.
	if r := f.Run(t, "conc", "echo $n"); string(r.Output) != fmt.Sprintf("%d\n", runs) {
		t.Errorf("count after %d runs = %q, want %d", runs, r.Output, runs)
	}
}

func shellClose(t *testing.T, f *fixture) {
	f.OpenShell(t, "close")
	f.Run(t, "close", "sleep 300 & echo $! > /tmp/close-job")
	if _, err := f.Shell(t, sandbox.ShellRequest{Op: sandbox.ShellClose, Name: "close"}); err != nil {
		t.Fatalf("close = %v", err)
	}
	for _, op := range []string{sandbox.ShellRun, sandbox.ShellInterrupt, sandbox.ShellClose} {
		if _, err := f.Shell(t, sandbox.ShellRequest{Op: op, Name: "close", Command: "true"}); !errors.Is(err, sandbox.ErrNoShell) {
			t.Errorf("%s after close = %v, want ErrNoShell", op, err)
		}
	}
	// The shell's background job ended with it.
	if r := f.Exec(t, "sh", "-c", "kill -0 $(cat /tmp/close-job)"); r.Status.Code == 0 {
		t.Errorf("the session's background job survived close")
	}
	if _, err := f.Shell(t, sandbox.ShellRequest{Op: sandbox.ShellOpen, Name: "close", UID: f.Spec.UID, GID: f.Spec.GID}); err != nil {
		t.Errorf("open after close = %v, want the name free again", err)
	}
}

// shellCheckpoint, for a tier that checkpoints: a session open when its
// sandbox is checkpointed is there, with its state, in the restored
// sandbox (the agent, its terminals and the shell are all restored).
func shellCheckpoint(t *testing.T, rt sandbox.Runtime, rootfs string) {
	ckr, ok := rt.(sandbox.Checkpointer)
	if !ok {
		t.Skipf("the %s tier does not checkpoint (no sandbox.Checkpointer)", rt.Name())
	}
	f := start(t, rt, rootfs, func(s *sandbox.Spec) { s.MemoryBytes = 512 << 20 })
	f.OpenShell(t, "ckpt")
	f.Run(t, "ckpt", "kept=before; cd /tmp; g() { echo g; }")
	image := t.TempDir()
	if err := ckr.Checkpoint(context.Background(), f.SB, image); err != nil {
		t.Fatalf("Checkpoint() with a shell session = %v", err)
	}
	restored, err := ckr.Restore(context.Background(), f.Spec, image)
	if err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	t.Cleanup(func() {
		if err := restored.Destroy(context.Background()); err != nil {
			t.Errorf("Destroy(restored) = %v", err)
		}
	})
	r := &fixture{SB: restored, Spec: f.Spec, Workspace: f.Workspace}
	if res := r.Run(t, "ckpt", "echo $kept; pwd; g"); string(res.Output) != "before\n/tmp\ng\n" || res.ExitCode != 0 {
		t.Errorf("run in the restored session = %q, %d; want its state kept", res.Output, res.ExitCode)
	}
	r.OpenShell(t, "new")
	if res := r.Run(t, "new", "echo new"); string(res.Output) != "new\n" {
		t.Errorf("run in a session opened after restore = %q, want new", res.Output)
	}
}
