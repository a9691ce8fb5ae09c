package console

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

const xss = `<script>alert(1)</script><img src=x onerror=alert(2)>`

// checkPage fetches path and checks it rendered, shows every want, has
// no unescaped markup from the data and no inline script or style.
func checkPage(t *testing.T, api http.Handler, path string, want ...string) string {
	t.Helper()
	rec := get(t, New(api, slog.New(slog.DiscardHandler)), path)
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", path, rec.Code, body)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("GET %s lacks %q:\n%s", path, w, body)
		}
	}
	for _, bad := range []string{"<script>", "<img", "style="} {
		if strings.Contains(body, bad) {
			t.Errorf("GET %s holds %q:\n%s", path, bad, body)
		}
	}
	return body
}

// rawFiles answers a workspace file's bytes as the API does (not JSON),
// and everything else as its fakeAPI.
type rawFiles struct {
	*fakeAPI
	body []byte
	path string
}

func (f *rawFiles) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/files") {
		f.path = r.URL.Query().Get("path")
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(f.body)
		return
	}
	f.fakeAPI.ServeHTTP(w, r)
}

func TestDeploymentPages(t *testing.T) {
	dep := map[string]any{
		"id": "dep_1", "project": "p", "env": "dev", "version": 3, "status": "BUILDING", "buildRunId": "run_b",
		"createdAt": "2026-11-25T04:00:00Z",
		"manifest": map[string]any{"project": "p", "tasks": []map[string]any{{
			"id": "fix" + xss, "module": "bundles/a.mjs", "export": "fix", "hasRun": true,
			"secrets": map[string]any{"GH_TOKEN": map[string]any{"env": "GITHUB_TOKEN"}, "KEY": map[string]any{"file": "/run/key", "mode": "0400"}},
			"sandbox": map[string]any{"name": "box", "workspace": "/src", "resources": map[string]any{"cpu": 2, "memory": "4Gi"}},
		}}},
		"images": map[string]any{"fix" + xss: map[string]any{"name": "i", "digest": "sha256:abc", "base": "helmr/bookworm-node22", "baseDigest": "sha256:def"}},
	}
	api := &fakeAPI{answers: map[string]any{
		"/v1/auth/me":           map[string]any{"kind": "owner"},
		"/v1/deployments":       map[string]any{"deployments": []any{dep}},
		"/v1/deployments/dep_1": dep,
	}}
	checkPage(t, api, "/deployments?project=p&env=dev", "v3", "BUILDING", `href="/deployments/dep_1?env=dev&amp;project=p"`, "&lt;script&gt;")
	checkPage(t, api, "/deployments/dep_1", "BUILDING", `data-run="run_b"`, "sha256:abc", "helmr/bookworm-node22", "sha256:def",
		"<code>/src</code>", "2 vCPU, memory 4Gi", "GH_TOKEN", "env GITHUB_TOKEN", "file /run/key; mode 0400", `src="/assets/operate.js"`, "&lt;img src=x")
}

func TestWorkspacePage(t *testing.T) {
	api := &fakeAPI{answers: map[string]any{
		"/v1/auth/me":         map[string]any{"kind": "owner"},
		"/v1/workspaces":      map[string]any{"workspaces": []any{map[string]any{"id": "ws_1", "project": "p", "env": "dev", "taskId": xss, "createdAt": "2026-11-25T04:00:00Z"}}},
		"/v1/workspaces/ws_1": map[string]any{"id": "ws_1", "project": "p", "env": "dev", "taskId": "a", "host": "h1", "createdAt": "2026-11-25T04:00:00Z"},
		"/v1/workspaces/ws_1/dir": map[string]any{"path": "src", "entries": []any{
			map[string]any{"name": "lib", "type": "dir", "size": 4096, "mode": "755"},
			map[string]any{"name": xss + ".txt", "type": "file", "size": 3, "mode": "644"},
		}},
		"/v1/workspaces/ws_1/trajectory": map[string]any{"operations": []any{
			map[string]any{"seq": 1, "kind": "exec", "request": map[string]any{"argv": []string{"sh", "-c", "echo hi > x"}}, "result": map[string]any{"exitCode": 2, "stdout": "[REDACTED] " + xss, "stderr": "", "durationMs": 12}, "startedAt": "2026-11-25T04:00:00Z", "durationMs": 12.4},
			map[string]any{"seq": 2, "kind": "file.read", "request": map[string]any{"path": "x"}, "result": map[string]any{"exitCode": 0, "stdout": "secret file body"}, "durationMs": 1},
		}},
	}}
	checkPage(t, api, "/workspaces?project=p&env=dev", "ws_1", "&lt;script&gt;")
	files := &rawFiles{fakeAPI: api, body: []byte(xss)}
	body := checkPage(t, files, "/workspaces/ws_1?path=src&file=src/a.txt",
		`<section id="terminal"`, `href="/workspaces/ws_1?path=src%2flib&amp;project=p&amp;env=dev"`, "lib/",
		`href="/v1/workspaces/ws_1/tar?path=src%2flib"`, "Download tar", "&lt;img src=x onerror=alert(2)&gt;.txt",
		`<pre class="file" tabindex="0">&lt;script&gt;alert(1)`, "a.txt</h3>", `id="upload-form"`, `data-dir="src"`,
		"sh -c &#39;echo hi &gt; x&#39;", "exit 2", "12 ms", "[REDACTED] &lt;script&gt;", "file.read", "exit 0")
	if strings.Contains(body, "secret file body") {
		t.Errorf("a file operation's output (the file) is in the trajectory:\n%s", body)
	}
	if files.path != "src/a.txt" {
		t.Errorf("the file read = %q, want src/a.txt", files.path)
	}
	files.body = []byte{0x7f, 'E', 'L', 'F', 0, 1}
	checkPage(t, files, "/workspaces/ws_1?file=bin/x", "Not text", `href="/v1/workspaces/ws_1/files?path=bin%2fx" download`)
	// Without workspaces:exec there is no file browser (listing and
	// reading are direct operations); the trajectory stays.
	api.answers["/v1/auth/me"] = map[string]any{"kind": "apiKey", "keyName": "k", "grants": []string{"workspaces:read"}}
	body = checkPage(t, api, "/workspaces/ws_1", "exit 2")
	if strings.Contains(body, `id="files"`) || strings.Contains(body, "upload-form") {
		t.Errorf("a key without workspaces:exec gets the file browser:\n%s", body)
	}
}

func TestWorkspaceFileBrowserErrorKeepsPage(t *testing.T) {
	api := &fakeAPI{answers: map[string]any{
		"/v1/auth/me":                    map[string]any{"kind": "owner"},
		"/v1/workspaces/ws_1":            map[string]any{"id": "ws_1", "project": "p", "env": "dev", "taskId": "a", "createdAt": "2026-11-25T04:00:00Z"},
		"/v1/workspaces/ws_1/trajectory": map[string]any{"operations": []any{}},
	}, status: map[string]int{"/v1/workspaces/ws_1/dir": http.StatusServiceUnavailable}}
	checkPage(t, api, "/workspaces/ws_1", "refused: /v1/workspaces/ws_1/dir", "No direct operations yet.")
}

func TestSettingsPagesFollowGrants(t *testing.T) {
	api := &fakeAPI{answers: map[string]any{
		"/v1/auth/me": map[string]any{"kind": "owner"},
		"/v1/secrets": map[string]any{"secrets": []any{map[string]any{"project": "p", "env": "dev", "name": "GH" + xss, "createdAt": "2026-11-25T04:00:00Z", "updatedAt": "2026-11-25T04:00:00Z"}}},
		"/v1/apikeys": map[string]any{"apiKeys": []any{
			map[string]any{"id": "k1", "kind": "api", "project": "p", "env": "dev", "name": "ci", "grants": []string{"runs:read"}, "createdAt": "2026-11-25T04:00:00Z"},
			map[string]any{"id": "k2", "kind": "api", "project": "p", "env": "dev", "grants": []string{"runs:read"}, "createdAt": "2026-11-25T04:00:00Z", "revokedAt": "2026-11-25T05:00:00Z"},
		}},
		"/v1/workers": map[string]any{"workers": []any{map[string]any{"id": "w1", "live": true, "slotsInUse": 2, "lastSeen": "2026-11-25T04:00:00Z",
			"capabilities": map[string]any{"arch": "amd64", "tiers": []string{"process", "gvisor"}, "slots": 4, "cpus": 2, "memoryBytes": 2 << 30, "host": "h" + xss},
			"runs":         []any{map[string]any{"id": "run_9", "taskId": "a", "status": "RUNNING", "tier": "gvisor"}}}}},
		"/v1/doctor": map[string]any{"tiers": []any{map[string]any{"name": "gvisor", "available": false, "reason": "no runsc", "isolation": "user-space kernel"}},
			"policy": "auto", "selected": "process", "egress": map[string]any{"policy": "none", "ok": true, "detail": "loopback only"}, "workspaceQuota": map[string]any{"quota": "0", "ok": true, "detail": "none"}},
	}}
	body := checkPage(t, api, "/secrets?project=p&env=dev", "GH&lt;script&gt;", `data-delete-secret="GH&lt;script&gt;`, `id="secret-form"`)
	for _, nav := range []string{">Deployments<", ">Workspaces<", ">Secrets<", ">API keys<", ">Workers<"} {
		if !strings.Contains(body, nav) {
			t.Errorf("the owner's nav lacks %s", nav)
		}
	}
	body = checkPage(t, api, "/apikeys?project=p&env=dev", `value="runs:manage"`, `value="workspaces:exec"`, `data-revoke-key="k1"`, "revoked", `id="apikey-created" class="created" role="status" hidden`)
	if strings.Contains(body, `data-revoke-key="k2"`) {
		t.Errorf("a revoked key can be revoked again:\n%s", body)
	}
	checkPage(t, api, "/workers?project=p&env=dev", "w1", "h&lt;script&gt;", "process, gvisor", "2 of 4", "2048 MiB", `href="/runs/run_9?env=dev&amp;project=p"`,
		"no runsc", "<strong>process</strong>", "loopback only")

	// A key with runs:read only: no secrets, keys or doctor; its nav
	// shows what it may open.
	api.answers["/v1/auth/me"] = map[string]any{"kind": "apiKey", "keyName": "k", "project": "p", "env": "dev", "grants": []string{"runs:read"}}
	body = checkPage(t, api, "/workers", "w1")
	if strings.Contains(body, "Doctor") || strings.Contains(body, ">Secrets<") || strings.Contains(body, ">API keys<") || strings.Contains(body, ">Deployments<") {
		t.Errorf("a key with runs:read only sees owner or other grants' parts:\n%s", body)
	}
	// The approvals inbox and tokens read GET /v1/tokens (tokens:read),
	// the test page the tasks (tasks:read): a key without them is not
	// sent to a page that answers 403.
	for _, nav := range []string{">Approvals<", ">Tokens<", ">Test<"} {
		if strings.Contains(body, nav) {
			t.Errorf("a key with runs:read only is offered %s:\n%s", nav, body)
		}
	}
	api.answers["/v1/auth/me"] = map[string]any{"kind": "apiKey", "keyName": "k", "project": "p", "env": "dev", "grants": []string{"runs:read", "tokens:read", "tasks:read"}}
	body = checkPage(t, api, "/workers", "w1")
	for _, nav := range []string{">Approvals<", ">Tokens<", ">Test<"} {
		if !strings.Contains(body, nav) {
			t.Errorf("a key with tokens:read and tasks:read is not offered %s", nav)
		}
	}
}
