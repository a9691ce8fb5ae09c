package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/deployments"
)

// consolePage gets a console page as credential (the owner's if empty) and
// checks that it rendered and shows every want.
func (e *apiEnv) consolePage(t *testing.T, credential, path string, want ...string) string {
	t.Helper()
	if credential == "" {
		credential = e.owner
	}
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+credential)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	body := string(data)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s = %d %s", path, resp.StatusCode, body)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("GET %s lacks %q:\n%s", path, w, body)
		}
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, "<img") || strings.Contains(body, "style=") {
		t.Errorf("GET %s holds markup from data or an inline script or style:\n%s", path, body)
	}
	return body
}

// TestConsoleDeploymentPagesThroughAPI: a deployment made through the
// API is listed, and its page shows its task's sandbox and secrets.
func TestConsoleDeploymentPagesThroughAPI(t *testing.T) {
	e := newAPI(t)
	task := goodTask("a")
	task.Sandbox.Workspace = "/src"
	task.Sandbox.Resources = deployments.Resources{CPU: 1, Memory: "512Mi"}
	task.Secrets = map[string]deployments.SecretTarget{"GH": {Env: "GH_TOKEN"}}
	st, d := e.call("POST", "/v1/deployments", deployment(task))
	if st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	id := d["id"].(string)
	e.consolePage(t, "", "/deployments?project=p&env=dev", "v1", "READY", "/deployments/"+id)
	e.consolePage(t, "", "/deployments/"+id, "p v1", "<code>/src</code>", "1 vCPU, memory 512Mi", "GH", "env GH_TOKEN", "built on the worker at the first run")
}

// TestConsoleWorkspacePageThroughAPI: a workspace's page lists its files
// through a worker answering direct operations, shows a text file, and
// the trajectory of those operations.
func TestConsoleWorkspacePageThroughAPI(t *testing.T) {
	e := newAPI(t)
	ws := e.freeWorkspace(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "<i>note.txt"), []byte("hello <script>x</script>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go e.runDataOps(ctx, dir)
	if st, body := e.call("POST", "/v1/workspaces/"+ws+"/exec", `{"command": "echo from-exec; exit 3"}`); st != http.StatusOK {
		t.Fatalf("exec = %d %v", st, body)
	}
	e.consolePage(t, "", "/workspaces?project=p&env=dev", ws)
	e.consolePage(t, "", "/workspaces/"+ws+"?file=%3Ci%3Enote.txt",
		"sub/", "&lt;i&gt;note.txt", "hello &lt;script&gt;x&lt;/script&gt;", `<section id="terminal"`,
		"echo from-exec; exit 3", "exit 3", "from-exec", "file.list")
	// A key with workspaces:read only sees the trajectory, no files
	// (no browser once the console knows its grants, the API's refusal
	// until then).
	k, _ := e.key("p", "dev", apikeys.WorkspacesRead)
	body := e.consolePage(t, k, "/workspaces/"+ws, "echo from-exec; exit 3")
	if strings.Contains(body, "sub/") || strings.Contains(body, "hello &lt;script") {
		t.Errorf("a key without workspaces:exec sees the workspace's files")
	}
}

// TestConsoleOperatePagesThroughAPI: a secret set through the API is
// listed by name, never with its value; API keys are listed for the
// owner with a revoke button; a worker that took a run is shown holding
// it; a key sees no doctor's report, and the API keys page refuses it.
func TestConsoleOperatePagesThroughAPI(t *testing.T) {
	e := newAPI(t)
	if st, body := e.call("PUT", "/v1/secrets/GH_TOKEN?project=p&env=dev", `{"value": "s3cr3t-value"}`); st != http.StatusOK {
		t.Fatalf("set secret = %d %v", st, body)
	}
	body := e.consolePage(t, "", "/secrets?project=p&env=dev", "GH_TOKEN", `data-delete-secret="GH_TOKEN"`)
	if strings.Contains(body, "s3cr3t-value") {
		t.Errorf("the secrets page shows a value")
	}
	key, keyID := e.key("p", "dev", apikeys.RunsRead)
	e.consolePage(t, "", "/apikeys", keyID, `data-revoke-key="`+keyID+`"`, `value="runs:manage"`)

	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	runID, _ := e.waitingRun(t)
	e.consolePage(t, "", "/workers?project=p&env=dev", "wfix", runID, "WAITING", "Doctor", "<strong>process</strong>", "runsc &lt;not found&gt;")
	body = e.consolePage(t, key, "/workers?project=p&env=dev", "wfix", runID)
	if strings.Contains(body, "<strong>process</strong>") || strings.Contains(body, "runsc &lt;not found&gt;") {
		t.Errorf("a key's workers page shows the doctor's report")
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/apikeys", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /apikeys as a key = %d, want 403", resp.StatusCode)
	}
}
