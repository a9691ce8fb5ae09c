package console

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func fakeRun(me map[string]any, status string) *fakeAPI {
	return &fakeAPI{answers: map[string]any{
		"/v1/auth/me": me,
		"/v1/runs/run_1": map[string]any{
			"id": "run_1", "kind": "task", "project": "p", "env": "dev", "taskId": "t", "status": status,
			"payload":   map[string]any{"note": xss, "big": strings.Repeat("x", 3000)},
			"output":    map[string]any{"ok": true},
			"error":     map[string]any{"class": "TASK_ERROR", "message": xss, "stack": "at " + xss},
			"replayOf":  "run_0",
			"createdAt": "2026-11-25T04:00:00Z", "lastSeq": 4,
			"metadata": map[string]any{"progress": 0.5, "label": xss},
			"waitingOn": []map[string]any{{
				"id": "wp_1", "kind": "human", "status": "WAITING", "displayText": "Merge " + xss + "?",
				"schema":    map[string]any{"type": "object", "required": []string{"ok"}, "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}},
				"createdAt": "2026-11-25T04:00:00Z", "waitedAt": "2026-11-25T04:00:01Z", "timeoutAt": "2026-11-26T04:00:00Z",
			}},
		},
	}}
}

// TestRunPageRendersDataAsText: every user value (payload, failure,
// metadata, the wait's text) is escaped; a large payload is collapsed;
// the schema rides in an attribute for the form's script; no inline
// script or style.
func TestRunPageRendersDataAsText(t *testing.T) {
	c := New(fakeRun(map[string]any{"kind": "owner"}, "WAITING"), slog.New(slog.DiscardHandler))
	rec := get(t, c, "/runs/run_1")
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /runs/run_1 = %d %s", rec.Code, body)
	}
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") || strings.Contains(body, "style=") {
		t.Errorf("user data reached the page as HTML:\n%s", body)
	}
	for _, want := range []string{
		"&lt;script&gt;alert(1)&lt;/script&gt;", // payload, error, metadata, display text
		"TASK_ERROR", "<summary>Stack</summary>",
		`<details><summary>`,                       // the large payload, collapsed
		`href="/runs/run_0?env=dev&amp;project=p"`, // replay of
		`id="cancel"`, `form class="approve"`, `form class="reject"`, `id="replay"`,
		`data-schema="{&#34;properties&#34;:`, // the schema, as an attribute
		`src="/assets/run.js"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the run page lacks %s", want)
		}
	}
}

// TestRunPageHidesActionsWithoutGrants: a key with runs:read only sees
// no cancel, approve, reject or replay.
func TestRunPageHidesActionsWithoutGrants(t *testing.T) {
	me := map[string]any{"name": "reader", "project": "p", "env": "dev", "grants": []string{"runs:read"}}
	c := New(fakeRun(me, "WAITING"), slog.New(slog.DiscardHandler))
	body := get(t, c, "/runs/run_1").Body.String()
	for _, gone := range []string{`id="cancel"`, `form class="approve"`, `form class="reject"`, `id="replay"`, `id="session-input"`} {
		if strings.Contains(body, gone) {
			t.Errorf("a runs:read key sees %s", gone)
		}
	}
	if !strings.Contains(body, "Merge &lt;script&gt;") {
		t.Errorf("the wait is not shown to a reader")
	}
}

func TestUnescapeHTML(t *testing.T) {
	for in, want := range map[string]string{
		`"\u003cb\u003e \u0026"`: `"<b> &"`,
		`"\\u003c"`:              `"\\u003c"`, // a backslash, then text
		`"\\\u003c"`:             `"\\<"`,
		`"\n\u00e9"`:             `"\n\u00e9"`,
		`"tail\`:                 `"tail\`,
	} {
		if got := string(unescapeHTML([]byte(in))); got != want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", in, got, want)
		}
	}
}
