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
	dir   string
	fail  error
	calls atomic.Int64
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

func (h *hostShell) ExecStdin(ctx context.Context, ws workspaces.Workspace, req workspaces.ExecRequest, tr workspaces.Trace) (workspaces.ExecResult, error) {
	return h.Exec(ctx, ws, req, tr)
}

func (h *hostShell) ExecOutput(ctx context.Context, ws workspaces.Workspace, req workspaces.ExecRequest, tr workspaces.Trace, _ int, _ string) (workspaces.ExecResult, error) {
	return h.Exec(ctx, ws, req, tr)
}

func newShell(t *testing.T) *hostShell {
	t.Helper()
	_, err := exec.LookPath("bash")
	testenv.Require(t, err == nil, "the test runs SWE-ReX commands with the host's bash")
	return &hostShell{dir: t.TempDir()}
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

func TestSessionKeepsDirectoryAndExports(t *testing.T) {
	a := New(newShell(t))
	if st, out, err := call(t, a.CreateSession, `{}`); err != nil || st != http.StatusOK {
		t.Fatalf("create_session = %d %v %v", st, out, err)
	}
	if st, out, err := call(t, a.RunInSession, `{"command": "mkdir -p d && cd d && export FOO=bar && LOCAL=x; echo hi"}`); err != nil || st != http.StatusOK || out["output"] != "hi\n" {
		t.Fatalf("run_in_session = %d %v %v, want hi", st, out, err)
	}
	st, out, err := call(t, a.RunInSession, `{"command": "basename $PWD; echo $FOO; echo \"[$LOCAL]\""}`)
	if err != nil || st != http.StatusOK || out["output"] != "d\nbar\n[]\n" || out["exit_code"] != float64(0) {
		t.Errorf("run_in_session after = %d %v %v, want the directory and the export, not the local", st, out, err)
	}
	st, out, _ = call(t, a.RunInSession, `{"command": "exit 3", "check": "silent"}`)
	if st != http.StatusOK || out["exit_code"] != float64(3) {
		t.Errorf("run_in_session(exit 3) = %d %v, want exit code 3", st, out)
	}
	if st, out, _ := call(t, a.CloseSession, `{}`); st != http.StatusOK {
		t.Errorf("close_session = %d %v", st, out)
	}
	st, out, _ = call(t, a.RunInSession, `{"command": "true"}`)
	if e, _ := out["swerexception"].(map[string]any); st != 511 || e["class_path"] != "swerex.exceptions.SessionDoesNotExistError" {
		t.Errorf("run_in_session after close = %d %v, want 511 SessionDoesNotExistError", st, out)
	}
}

// TestConcurrentCallsOnOneSession: 40 calls on one session at once each
// get their answer, and the session keeps the state of one of them, whole
// (the race detector checks the rest).
func TestConcurrentCallsOnOneSession(t *testing.T) {
	a := New(newShell(t))
	if st, out, err := call(t, a.CreateSession, `{"session": "s"}`); err != nil || st != http.StatusOK {
		t.Fatalf("create_session = %d %v %v", st, out, err)
	}
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := fmt.Sprintf(`{"session": "s", "command": "mkdir -p d%d && cd d%d && export LAST=%d && echo %d"}`, i, i, i, i)
			if st, out, err := call(t, a.RunInSession, cmd); err != nil || st != http.StatusOK || out["output"] != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Sprintf("run_in_session #%d = %d %v %v", i, st, out, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	_, out, err := call(t, a.RunInSession, `{"session": "s", "command": "echo $LAST $(basename $PWD)"}`)
	var last, dir int
	got, _ := out["output"].(string)
	if _, serr := fmt.Sscanf(got, "%d d%d", &last, &dir); err != nil || serr != nil || last != dir || last < 0 || last >= n {
		t.Errorf("the session after the concurrent calls = %q %v, want the export and directory of one call", got, err)
	}
}

func TestReplayByRequestID(t *testing.T) {
	sh := newShell(t)
	a := New(sh)
	if st, out, err := call(t, a.CreateSession, `{}`); err != nil || st != http.StatusOK {
		t.Fatalf("create_session = %d %v %v", st, out, err)
	}
	before := sh.calls.Load()
	_, first, _ := call(t, a.RunInSession, `{"command": "date +%s%N"}`, "X-Request-ID", "r1")
	_, again, _ := call(t, a.RunInSession, `{"command": "date +%s%N"}`, "X-Request-ID", "r1")
	if first["output"] == nil || first["output"] != again["output"] || sh.calls.Load() != before+1 {
		t.Errorf("a request sent twice with one X-Request-ID = %v then %v after %d runs, want one run and its answer twice", first, again, sh.calls.Load()-before)
	}
	// The replies kept are bounded.
	for i := range maxReplies + 1 {
		call(t, a.RunInSession, `{"command": "true"}`, "X-Request-ID", fmt.Sprint("n", i))
	}
	if rt := a.runtimeFor(ws.ID); len(rt.replies) != maxReplies || len(rt.order) != maxReplies {
		t.Errorf("replies kept = %d (order %d), want %d", len(rt.replies), len(rt.order), maxReplies)
	}
}

func TestErrorShapes(t *testing.T) {
	a := New(newShell(t))
	rec := httptest.NewRecorder()
	if err := a.RunInSession(rec, httptest.NewRequest("POST", "/", strings.NewReader(`{"command": 3}`)), ws); err != nil || rec.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(rec.Body.String(), `"code":"invalid_request"`) {
		t.Errorf("a body SWE-ReX's schema refuses = %v %d %s, want 422 invalid_request", err, rec.Code, rec.Body)
	}
	if _, _, err := call(t, a.CreateSession, `{"session_type": "zsh"}`); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("create_session(zsh) = %v, want invalid", err)
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
	if st, out, _ := call(t, a.Execute, `{"command": ""}`); st != http.StatusUnprocessableEntity {
		t.Errorf("execute of an empty command = %d %v, want 422", st, out)
	}
}
