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
	// The session holds the state one of the calls ended with: its
	// directory and its export, together.
	st, body := e.call("POST", base+"/run_in_session", `{"session": "s", "command": "echo $LAST $(basename $PWD)"}`)
	var last int
	out, _ := body["output"].(string)
	out = strings.TrimSpace(out)
	if _, err := fmt.Sscanf(out, "%d d%d", &last, &last); st != http.StatusOK || err != nil || out != fmt.Sprintf("%d d%d", last, last) || last < 0 || last >= n {
		t.Errorf("run_in_session after the concurrent calls = %d %v, want the export and directory of one of them", st, body)
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
		if resp.StatusCode != http.StatusOK || op.Exec == nil {
			continue
		}
		res := runLocal(ctx, dir, *op.Exec)
		data, _ := json.Marshal(workspaces.OpResult{Exec: &res, Host: "h-ops"})
		post, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/worker/ops/"+op.ID+"/result", bytes.NewReader(data))
		post.Header.Set("Authorization", "Bearer wtok")
		if resp, err := http.DefaultClient.Do(post); err == nil {
			resp.Body.Close()
		}
	}
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
