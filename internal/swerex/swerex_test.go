package swerex

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/testenv"
	"github.com/helmr/helmr/internal/workspaces"
)

// hostShell runs operations with the host's shell in dir, as a
// workspace's sandbox would; fail, if set, is the error every operation
// ends with.
type hostShell struct {
	dir      string
	fail     error
	calls    atomic.Int64
	sessions sessions
}

func (h *hostShell) Exec(ctx context.Context, _ workspaces.Workspace, req workspaces.ExecRequest, _ workspaces.Trace) (workspaces.ExecResult, error) {
	h.calls.Add(1)
	if h.fail != nil {
		return workspaces.ExecResult{}, h.fail
	}
	if err := req.Validate(); err != nil {
		return workspaces.ExecResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, req.Timeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...)
	cmd.Dir = h.dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + h.dir}
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(req.Stdin), &stdout, &stderr
	err := cmd.Run()
	res := workspaces.ExecResult{Stdout: stdout.String(), Stderr: stderr.String(), TimedOut: ctx.Err() != nil}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode = ee.ExitCode()
	} else if err != nil {
		return workspaces.ExecResult{}, err
	}
	return res, nil
}

func newShell(t *testing.T) *hostShell {
	t.Helper()
	_, err := exec.LookPath("bash")
	testenv.Require(t, err == nil, "the test runs SWE-ReX commands with the host's bash")
	return &hostShell{dir: t.TempDir(), sessions: sessions{open: map[string]bool{}}}
}

var ws = workspaces.Workspace{ID: "ws_test", Project: "p", Env: "dev"}

// call sends a request to endpoint h and returns the status and the
// decoded answer; a Helmr error is returned as the handler returns it.
func call(t testing.TB, h Handler, body string, header ...string) (int, map[string]any, error) {
	t.Helper()
	req := httptest.NewRequest("POST", "/v1/swerex/ws_test/x", strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	if err := h(rec, req, ws); err != nil {
		return 0, nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("answer %q: %v", rec.Body, err)
	}
	return rec.Code, out, nil
}

// sessions answers shell requests from a script: each session's result
// by command, as a worker would send them.
type sessions struct {
	mu   sync.Mutex
	open map[string]bool
	got  []workspaces.ShellRequest
	run  func(cmd string) workspaces.ShellResult
}

func (h *hostShell) Shell(_ context.Context, _ workspaces.Workspace, req workspaces.ShellRequest, _ workspaces.Trace) (workspaces.ShellResult, error) {
	h.calls.Add(1)
	if h.fail != nil {
		return workspaces.ShellResult{}, h.fail
	}
	if err := req.Validate(); err != nil {
		return workspaces.ShellResult{}, err
	}
	s := &h.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, req)
	switch {
	case req.Op == workspaces.ShellOpen && s.open[req.Session]:
		return workspaces.ShellResult{Exists: true}, nil
	case req.Op == workspaces.ShellOpen:
		s.open[req.Session] = true
		return workspaces.ShellResult{Output: "started\n"}, nil
	case req.Op == workspaces.ShellCloseAll:
		s.open = map[string]bool{}
		return workspaces.ShellResult{}, nil
	case !s.open[req.Session]:
		return workspaces.ShellResult{Missing: true}, nil
	case req.Op == workspaces.ShellClose:
		delete(s.open, req.Session)
		return workspaces.ShellResult{}, nil
	case req.Op == workspaces.ShellInterrupt:
		return workspaces.ShellResult{Output: "^C"}, nil
	}
	return s.run(req.Command), nil
}

// TestSessionAnswers: what a session's shell answers becomes what
// SWE-ReX's server would answer, its exceptions included.
func TestSessionAnswers(t *testing.T) {
	sh := newShell(t)
	sh.sessions.run = func(cmd string) workspaces.ShellResult {
		switch cmd {
		case "fi":
			return workspaces.ShellResult{SyntaxError: true, ExitCode: 2, SyntaxStderr: "bash: line 1: syntax error near unexpected token `fi'\n"}
		case "sleep 9":
			return workspaces.ShellResult{TimedOut: true, Output: "partial"}
		case "false":
			return workspaces.ShellResult{ExitCode: 1, Output: "out\n"}
		}
		return workspaces.ShellResult{Output: "hi\n"}
	}
	a := New(sh)
	if st, out, err := call(t, a.CreateSession, `{"startup_source": ["/root/.bashrc"]}`); err != nil || st != http.StatusOK || out["output"] != "started\n" {
		t.Fatalf("create_session = %d %v %v", st, out, err)
	}
	if got := sh.sessions.got[0]; got.Session != "default" || len(got.StartupSource) != 1 || got.StartupSource[0] != "/root/.bashrc" {
		t.Errorf("create_session asked %+v, want the default session sourcing /root/.bashrc", got)
	}
	exception := func(name, body string, class string, msg string) map[string]any {
		t.Helper()
		st, out, err := call(t, a.RunInSession, body)
		e, _ := out["swerexception"].(map[string]any)
		if err != nil || st != 511 || e["class_path"] != class || !strings.Contains(fmt.Sprint(e["message"]), msg) {
			t.Errorf("%s = %d %v %v, want 511 %s saying %q", name, st, out, err, class, msg)
		}
		return e
	}
	e := exception("a syntax error", `{"command": "fi"}`, "swerex.exceptions.BashIncorrectSyntaxError", "Error (exit code 2) while checking bash command \n'fi'\n---- Stderr ----\nbash: line 1")
	if info, _ := e["extra_info"].(map[string]any); info["bash_stderr"] == nil {
		t.Errorf("BashIncorrectSyntaxError's extra_info = %v, want bash_stdout and bash_stderr", e["extra_info"])
	}
	exception("a timeout", `{"command": "sleep 9", "timeout": 0.5}`, "swerex.exceptions.CommandTimeoutError", "timeout after 0.5 seconds while running command 'sleep 9'")
	exception("check raise", `{"command": "false"}`, "swerex.exceptions.NonZeroExitCodeError", "Command 'false' failed with exit code 1. Here is the output:\n'out\\n'")
	exception("an unknown session", `{"command": "true", "session": "nope"}`, "swerex.exceptions.SessionDoesNotExistError", "session 'nope' does not exist")
	for body, want := range map[string]any{`{"command": "false", "check": "silent"}`: float64(1), `{"command": "false", "check": "ignore"}`: nil} {
		if st, out, err := call(t, a.RunInSession, body); err != nil || st != http.StatusOK || out["exit_code"] != want || out["output"] != "out\n" {
			t.Errorf("run_in_session %s = %d %v %v, want exit_code %v", body, st, out, err, want)
		}
	}
	if st, out, err := call(t, a.RunInSession, `{"action_type": "bash_interrupt", "timeout": 0.3, "n_retry": 2}`); err != nil || st != http.StatusOK || out["output"] != "^C" {
		t.Errorf("bash_interrupt = %d %v %v", st, out, err)
	}
	last := sh.sessions.got[len(sh.sessions.got)-1]
	if last.Op != workspaces.ShellInterrupt || last.TimeoutSeconds != 0.3 || last.Retries != 2 {
		t.Errorf("bash_interrupt asked %+v, want an interrupt of 2 tries of 0.3 s", last)
	}
	st, out, _ := call(t, a.CreateSession, `{}`)
	if e, _ := out["swerexception"].(map[string]any); st != 511 || e["class_path"] != "swerex.exceptions.SessionExistsError" {
		t.Errorf("create_session twice = %d %v, want SessionExistsError", st, out)
	}
	if st, out, _ := call(t, a.Close, `{}`); st != http.StatusOK {
		t.Errorf("close = %d %v", st, out)
	}
	st, out, _ = call(t, a.CloseSession, `{}`)
	if e, _ := out["swerexception"].(map[string]any); st != 511 || e["class_path"] != "swerex.exceptions.SessionDoesNotExistError" {
		t.Errorf("close_session after close = %d %v, want SessionDoesNotExistError", st, out)
	}
}

func TestReplayByRequestID(t *testing.T) {
	sh := newShell(t)
	a := New(sh)
	before := sh.calls.Load()
	_, first, _ := call(t, a.Execute, `{"command": "date +%s%N", "shell": true}`, "X-Request-ID", "r1")
	_, again, _ := call(t, a.Execute, `{"command": "date +%s%N", "shell": true}`, "X-Request-ID", "r1")
	if first["stdout"] == nil || first["stdout"] != again["stdout"] || sh.calls.Load() != before+1 {
		t.Errorf("a request sent twice with one X-Request-ID = %v then %v after %d runs, want one run and its answer twice", first, again, sh.calls.Load()-before)
	}
	// Reads run again: they change nothing, and their answers are large.
	files := &hostFiles{Workspaces: sh}
	b := New(files)
	call(t, b.ReadFile, `{"path": "/etc/hostname"}`, "X-Request-ID", "r2")
	call(t, b.ReadFile, `{"path": "/etc/hostname"}`, "X-Request-ID", "r2")
	if n := len(files.kinds); n != 2 {
		t.Errorf("read_file sent twice with one X-Request-ID ran %d times, want 2", n)
	}
}

// TestReplayCacheBounds: the kept answers stay within their bytes and
// age, an answer too large is not kept, and the newest stay.
func TestReplayCacheBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newReplayCache(1000, time.Minute)
	c.now = func() time.Time { return now }
	for i := range 30 {
		c.put(fmt.Sprint(i), reply{status: 200, body: bytes.Repeat([]byte("x"), 100)})
	}
	if c.bytes() > 1000 {
		t.Errorf("kept %d bytes, want at most 1000", c.bytes())
	}
	if _, ok := c.get("29"); !ok {
		t.Error("the newest answer is gone")
	}
	if _, ok := c.get("0"); ok {
		t.Error("the oldest answer is still kept past the bound")
	}
	c.put("big", reply{body: make([]byte, 1001)})
	if _, ok := c.get("big"); ok {
		t.Error("an answer larger than the bound is kept")
	}
	now = now.Add(2 * time.Minute)
	if _, ok := c.get("29"); ok || c.bytes() != 0 {
		t.Errorf("answers older than the age are kept (%d bytes)", c.bytes())
	}
}

func TestErrorShapes(t *testing.T) {
	a := New(newShell(t))
	rec := httptest.NewRecorder()
	if err := a.RunInSession(rec, httptest.NewRequest("POST", "/", strings.NewReader(`{"command": 3}`)), ws); err != nil || rec.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(rec.Body.String(), `"code":"invalid_request"`) {
		t.Errorf("a body SWE-ReX's schema refuses = %v %d %s, want 422 invalid_request", err, rec.Code, rec.Body)
	}
	if st, out, err := call(t, a.CreateSession, `{"session_type": "zsh"}`); err != nil || st != http.StatusUnprocessableEntity || out["detail"] == nil {
		t.Errorf("create_session(zsh) = %d %v %v, want a 422 with detail", st, out, err)
	}
	st, out, _ := call(t, a.Execute, `{"command": ["sh", "-c", "exit 4"], "check": true}`)
	if e, _ := out["swerexception"].(map[string]any); st != 511 || e["class_path"] != "swerex.exceptions.NonZeroExitCodeError" {
		t.Errorf("execute(exit 4, check) = %d %v, want 511 NonZeroExitCodeError", st, out)
	}
	// Helmr's own errors go back to the router, to answer as the API does.
	gone := errdefs.Conflictf("workspace ws_test was deleted")
	b := New(&hostShell{fail: gone})
	if _, _, err := call(t, b.Execute, `{"command": "true"}`); !errors.Is(err, gone) {
		t.Errorf("execute on a deleted workspace = %v, want %v", err, gone)
	}
	if st, out, _ := call(t, b.IsAlive, ``); st != http.StatusOK || out["is_alive"] != true {
		t.Errorf("is_alive = %d %v", st, out)
	}
	deleted := ws
	now := time.Now()
	deleted.DeletedAt = &now
	rec = httptest.NewRecorder()
	if err := b.IsAlive(rec, httptest.NewRequest("GET", "/", nil), deleted); err != nil || !strings.Contains(rec.Body.String(), `"is_alive":false`) {
		t.Errorf("is_alive(deleted) = %v %s, want false", err, rec.Body)
	}
}

func TestExecuteAsSubprocessRun(t *testing.T) {
	a := New(newShell(t))
	for _, c := range []struct{ body, stdout, stderr string }{
		{`{"command": ["printf", "%s", "a b"]}`, "a b", ""},
		{`{"command": "echo out; echo err >&2; pwd", "shell": true, "cwd": "/tmp", "merge_output_streams": true}`, "out\nerr\n/tmp\n", ""},
		{`{"command": "echo out; echo err >&2", "shell": true}`, "out\n", "err\n"},
		{`{"command": ["echo", "$HOME"], "shell": true, "env": {"HOME": "/h"}}`, "/h\n", ""},
	} {
		st, out, err := call(t, a.Execute, c.body)
		if err != nil || st != http.StatusOK || out["stdout"] != c.stdout || out["stderr"] != c.stderr || out["exit_code"] != float64(0) {
			t.Errorf("execute %s = %d %v %v, want stdout %q, stderr %q", c.body, st, out, err, c.stdout, c.stderr)
		}
	}
	for _, body := range []string{`{"command": ["no-such-program", "x"]}`, `{"command": "no-such-program"}`, `{"command": ["ls"], "cwd": "/no/such/dir"}`} {
		st, out, _ := call(t, a.Execute, body)
		if e, _ := out["swerexception"].(map[string]any); st != 511 || e["class_path"] != "builtins.FileNotFoundError" ||
			!strings.HasPrefix(fmt.Sprint(e["message"]), "[Errno 2] No such file or directory: '") {
			t.Errorf("execute %s = %d %v, want FileNotFoundError as subprocess.run raises", body, st, out)
		}
	}
	if st, out, _ := call(t, a.Execute, `{"command": "no-such-program", "shell": true}`); st != http.StatusOK || out["exit_code"] != float64(127) {
		t.Errorf("execute of a missing program through a shell = %d %v, want exit code 127", st, out)
	}
	if st, out, _ := call(t, a.Execute, `{"command": ""}`); st != http.StatusUnprocessableEntity {
		t.Errorf("execute of an empty command = %d %v, want 422", st, out)
	}
}
