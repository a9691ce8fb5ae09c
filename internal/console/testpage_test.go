package console

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func fakeTest(me map[string]any) *fakeAPI {
	return &fakeAPI{answers: map[string]any{
		"/v1/auth/me": me,
		"/v1/tasks": map[string]any{"tasks": []map[string]any{
			{"id": "fix", "deploymentVersion": 3, "spec": map[string]any{"secrets": map[string]any{
				"GH_TOKEN": map[string]any{"env": "GH_TOKEN"}, "KEY": map[string]any{"file": "/run/key"},
			}}},
			{"id": "other", "deploymentVersion": 3, "spec": map[string]any{}},
		}},
		"/v1/secrets": map[string]any{"secrets": []map[string]any{{"name": "GITHUB_PAT"}}},
		"/v1/runs": map[string]any{"runs": []map[string]any{
			{"id": "run_2", "payload": map[string]any{"repo": xss}},
			{"id": "run_1", "payload": map[string]any{"repo": xss}},
			{"id": "run_0", "payload": map[string]any{"repo": "b"}},
		}},
	}}
}

// TestTestPage: the chosen task's declared secrets are offered for
// binding to vault names, recent distinct payloads are offered again
// (as text), and without runs:create there is no trigger form.
func TestTestPage(t *testing.T) {
	c := New(fakeTest(map[string]any{"kind": "owner"}), slog.New(slog.DiscardHandler))
	rec := get(t, c, "/test?project=p&env=dev&task=fix")
	body := rec.Body.String()
	if rec.Code != http.StatusOK || strings.Contains(body, "<script>alert") {
		t.Fatalf("GET /test = %d %s", rec.Code, body)
	}
	for _, want := range []string{
		`<option value="fix" selected>fix (v3)</option>`, `id="trigger"`, `data-task="fix"`,
		`data-secret="GH_TOKEN"`, "env GH_TOKEN", `data-secret="KEY"`, "file /run/key",
		`<option value="GITHUB_PAT">`, `src="/assets/test.js"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the test page lacks %s", want)
		}
	}
	if n := strings.Count(body, `class="use"`); n != 2 {
		t.Errorf("the test page offers %d recent payloads, want 2 (distinct)", n)
	}
	reader := New(fakeTest(map[string]any{"name": "r", "project": "p", "env": "dev", "grants": []string{"tasks:read", "runs:read"}}), slog.New(slog.DiscardHandler))
	if body := get(t, reader, "/test?project=p&env=dev&task=fix").Body.String(); strings.Contains(body, `id="trigger"`) {
		t.Errorf("a key without runs:create sees the trigger form")
	}
}
