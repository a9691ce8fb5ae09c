package console

import (
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func fakeWaits(me map[string]any) *fakeAPI {
	return &fakeAPI{answers: map[string]any{
		"/v1/auth/me": me,
		"/v1/tokens": map[string]any{"waitpoints": []map[string]any{
			{"id": "wp_h", "runId": "run_1", "kind": "human", "status": "WAITING", "displayText": xss, "tags": []string{xss},
				"schema": map[string]any{"type": "object"}, "createdAt": "2026-11-25T04:00:00Z"},
			{"id": "wp_t", "kind": "token", "status": "COMPLETED", "data": map[string]any{"x": xss}, "createdAt": "2026-11-25T04:00:00Z"},
		}, "nextCursor": "c2"},
	}}
}

// TestApprovalsInbox: the inbox asks for waiting human waits only, shows
// them as text with approve and reject, and hides both without
// runs:manage.
func TestApprovalsInbox(t *testing.T) {
	api := fakeWaits(map[string]any{"kind": "owner"})
	c := New(api, slog.New(slog.DiscardHandler))
	rec := get(t, c, "/approvals?project=p&env=dev")
	body := rec.Body.String()
	if rec.Code != http.StatusOK || strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
		t.Fatalf("GET /approvals = %d %s", rec.Code, body)
	}
	i := slices.IndexFunc(api.paths, func(p string) bool { return strings.HasPrefix(p, "/v1/tokens?") })
	if i < 0 || !strings.Contains(api.paths[i], "kind=human") || !strings.Contains(api.paths[i], "status=WAITING") {
		t.Errorf("the inbox asked %v, want waiting human waits", api.paths)
	}
	for _, want := range []string{`data-run="run_1"`, `form class="approve"`, `form class="reject"`, "&lt;script&gt;alert(1)", `src="/assets/waits.js"`, `aria-current="page">Approvals`} {
		if !strings.Contains(body, want) {
			t.Errorf("the inbox lacks %s", want)
		}
	}
	reader := New(fakeWaits(map[string]any{"name": "r", "project": "p", "env": "dev", "grants": []string{"runs:read", "tokens:read"}}), slog.New(slog.DiscardHandler))
	if body := get(t, reader, "/approvals?project=p&env=dev").Body.String(); strings.Contains(body, `form class="approve"`) || strings.Contains(body, `form class="reject"`) {
		t.Errorf("a key without runs:manage sees approve or reject")
	}
}

// TestTokensPage: filters reach GET /v1/tokens, data is text, complete
// and cancel show on waiting tokens only, and only with their grants.
func TestTokensPage(t *testing.T) {
	api := fakeWaits(map[string]any{"kind": "owner"})
	c := New(api, slog.New(slog.DiscardHandler))
	rec := get(t, c, "/tokens?project=p&env=dev&status=WAITING&kind=token&tag=ci")
	body := rec.Body.String()
	if rec.Code != http.StatusOK || strings.Contains(body, "<script>alert") {
		t.Fatalf("GET /tokens = %d %s", rec.Code, body)
	}
	i := slices.IndexFunc(api.paths, func(p string) bool { return strings.HasPrefix(p, "/v1/tokens?") })
	for _, want := range []string{"status=WAITING", "kind=token", "tag=ci"} {
		if i < 0 || !strings.Contains(api.paths[i], want) {
			t.Errorf("GET /v1/tokens lacks %s: %v", want, api.paths)
		}
	}
	if strings.Count(body, `<form class="complete"`) != 1 || strings.Count(body, `<form class="cancel"`) != 1 {
		t.Errorf("want complete and cancel on the one waiting token:\n%s", body)
	}
	if !strings.Contains(body, "&lt;script&gt;") || !strings.Contains(body, "?cursor=c2") {
		t.Errorf("the tokens page lacks its escaped data or next page")
	}
	reader := New(fakeWaits(map[string]any{"name": "r", "project": "p", "env": "dev", "grants": []string{"tokens:read"}}), slog.New(slog.DiscardHandler))
	if body := get(t, reader, "/tokens?project=p&env=dev").Body.String(); strings.Contains(body, `form class="complete"`) || strings.Contains(body, `form class="cancel"`) {
		t.Errorf("a tokens:read key sees complete or cancel")
	}
}
