package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/testenv"
	"github.com/helmr/helmr/internal/workspaces"
)

// TestSwerexSessionConcurrentCalls sends 40 run_in_session calls on one
// SWE-ReX session at once, as a client retrying while its first attempt
// still runs does. Each must be answered, and the server must stay up: a
// session's directory and environment, read and written by every call,
// once crashed the whole control plane (concurrent map read and write).
func TestSwerexSessionConcurrentCalls(t *testing.T) {
	_, err := exec.LookPath("bash")
	testenv.Require(t, err == nil, "the test's worker runs operations with bash")
	e := newAPI(t)
	ws := e.freeWorkspace(t)
	ctx, stop := context.WithCancel(t.Context())
	dir := t.TempDir() // the workspace
	var workers sync.WaitGroup
	for i := range 8 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			e.runOps(ctx, fmt.Sprintf("wsh%d", i), dir)
		}()
	}
	defer func() { stop(); workers.Wait() }()

	base := "/v1/swerex/" + ws
	if st, body := e.call("POST", base+"/create_session", `{"session": "s"}`); st != http.StatusOK {
		t.Fatalf("create_session = %d %v", st, body)
	}
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := fmt.Sprintf(`{"session": "s", "command": "mkdir -p d%d && cd d%d && export LAST=%d && echo %d"}`, i, i, i, i)
			st, body, err := e.tryCall("POST", base+"/run_in_session", cmd)
			switch {
			case err != nil:
				errs <- fmt.Sprintf("run_in_session #%d: %v", i, err)
			case st != http.StatusOK || body["output"] != fmt.Sprintf("%d\n", i) || body["exit_code"] != float64(0):
				errs <- fmt.Sprintf("run_in_session #%d = %d %v, want output %d, exit 0", i, st, body, i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	if st, body := e.call("GET", "/v1/health", nil); st != http.StatusOK {
		t.Fatalf("health after concurrent calls = %d %v", st, body)
	}
	// A session the worker does not hold is SWE-ReX's exception.
	st, body := e.call("POST", base+"/run_in_session", `{"session": "nope", "command": "true"}`)
	if exc, _ := body["swerexception"].(map[string]any); st != 511 || exc["class_path"] != "swerex.exceptions.SessionDoesNotExistError" {
		t.Errorf("run_in_session on no session = %d %v, want 511 SessionDoesNotExistError", st, body)
	}
}

// freeWorkspace deploys task a and returns the workspace of a run of it,
// canceled, so that direct operations may use it.
func (e *apiEnv) freeWorkspace(t *testing.T) string {
	t.Helper()
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	st, r := e.call("POST", "/v1/tasks/a/runs?project=p&env=dev", `{"payload": 1}`)
	if st != http.StatusCreated {
		t.Fatalf("trigger = %d %v", st, r)
	}
	if st, body := e.call("POST", "/v1/runs/"+r["id"].(string)+"/cancel", nil); st != http.StatusOK {
		t.Fatalf("cancel = %d %v", st, body)
	}
	return r["workspaceId"].(string)
}

// tryCall is call for a goroutine other than the test's: a failure to
// send is returned, not fatal.
func (e *apiEnv) tryCall(method, path, body string) (int, map[string]any, error) {
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+e.owner)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

// runOps is a worker that runs direct operations as a worker's sandbox
// would, with the host's bash in dir (the workspace), until ctx ends.
func (e *apiEnv) runOps(ctx context.Context, workerID, dir string) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/worker/ops/next",
			strings.NewReader(fmt.Sprintf(`{"workerId": %q, "host": "h-ops"}`, workerID)))
		req.Header.Set("Authorization", "Bearer wtok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		var op workspaces.Op
		_ = json.NewDecoder(resp.Body).Decode(&op)
		resp.Body.Close()
		var res workspaces.OpResult
		switch {
		case resp.StatusCode != http.StatusOK:
			continue
		case op.Exec != nil:
			ex := runLocal(ctx, dir, *op.Exec)
			res = workspaces.OpResult{Exec: &ex, Host: "h-ops"}
		case op.Shell != nil:
			sh := e.shell(ctx, dir, *op.Shell)
			res = workspaces.OpResult{Shell: &sh, Host: "h-ops"}
		default:
			continue
		}
		data, _ := json.Marshal(res)
		post, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/worker/ops/"+op.ID+"/result", bytes.NewReader(data))
		post.Header.Set("Authorization", "Bearer wtok")
		if resp, err := http.DefaultClient.Do(post); err == nil {
			resp.Body.Close()
		}
	}
}

// shell answers a shell request as a worker would, one command of a
// session at a time, each in the host's bash (the session's state is the
// sandbox's business, tested with the tiers).
func (e *apiEnv) shell(ctx context.Context, dir string, req workspaces.ShellRequest) workspaces.ShellResult {
	e.shellMu.Lock()
	defer e.shellMu.Unlock()
	if e.shells == nil {
		e.shells = map[string]bool{}
	}
	switch {
	case req.Op == workspaces.ShellOpen && e.shells[req.Session]:
		return workspaces.ShellResult{Exists: true}
	case req.Op == workspaces.ShellOpen:
		e.shells[req.Session] = true
		return workspaces.ShellResult{}
	case !e.shells[req.Session]:
		return workspaces.ShellResult{Missing: true}
	case req.Op == workspaces.ShellRun:
		res := runLocal(ctx, dir, workspaces.ExecRequest{Argv: []string{"bash", "-c", req.Command}})
		return workspaces.ShellResult{Output: res.Stdout + res.Stderr, ExitCode: res.ExitCode}
	}
	return workspaces.ShellResult{}
}

// runLocal runs an exec request on the host in dir, with a bare
// environment and the request's.
func runLocal(ctx context.Context, dir string, req workspaces.ExecRequest) workspaces.ExecResult {
	argv := req.Argv
	if req.Command != "" {
		argv = []string{"/bin/sh", "-c", req.Command}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir}
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(req.Stdin), &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	res := workspaces.ExecResult{Stdout: stdout.String(), Stderr: stderr.String(), DurationMs: float64(time.Since(start).Milliseconds())}
	if ee, ok := err.(*exec.ExitError); ok {
		res.ExitCode = ee.ExitCode()
	} else if err != nil {
		res.ExitCode, res.Stderr = 127, err.Error()
	}
	return res
}

// TestSwerexErrorsCarryDetail: SWE-ReX's client prints the "detail" of an
// error answer, as FastAPI sends it; Helmr's errors on its routes carry
// one beside Helmr's own shape.
func TestSwerexErrorsCarryDetail(t *testing.T) {
	e := newAPI(t)
	for _, c := range []struct {
		token, path string
		status      int
	}{
		{"nope", "/v1/swerex/ws_missing/is_alive", http.StatusUnauthorized},
		{e.owner, "/v1/swerex/ws_missing/is_alive", http.StatusNotFound},
	} {
		req, _ := http.NewRequest("GET", e.srv.URL+c.path, nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if errBody, _ := body["error"].(map[string]any); resp.StatusCode != c.status || body["detail"] == "" || body["detail"] != errBody["message"] {
			t.Errorf("GET %s = %d %v, want %d with detail", c.path, resp.StatusCode, body, c.status)
		}
	}
}

// TestTrajectoryAfterAnySeq: the trajectory's cursor is a seq, which may
// be past any page size.
func TestTrajectoryAfterAnySeq(t *testing.T) {
	e := newAPI(t)
	ws := e.freeWorkspace(t)
	if st, body := e.call("GET", "/v1/workspaces/"+ws+"/trajectory?after=641883&limit=1", nil); st != http.StatusOK {
		t.Errorf("trajectory after 641883 = %d %v, want 200", st, body)
	}
	if st, _ := e.call("GET", "/v1/workspaces/"+ws+"/trajectory?after=-1", nil); st != http.StatusBadRequest {
		t.Errorf("trajectory after -1 = %d, want 400", st)
	}
}
