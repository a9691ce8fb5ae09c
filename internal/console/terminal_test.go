package console

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestWorkspaceTerminal: the workspace page offers the terminal (its
// script, xterm.js's stylesheet and the box it draws in) to a principal
// with workspaces:exec only, and the vendored xterm.js is served as
// JavaScript modules with its license.
func TestWorkspaceTerminal(t *testing.T) {
	api := &fakeAPI{answers: map[string]any{
		"/v1/auth/me":                    map[string]any{"kind": "owner"},
		"/v1/workspaces/ws_1":            map[string]any{"id": "ws_1", "project": "p", "env": "dev", "taskId": "a", "createdAt": "2026-11-25T04:00:00Z"},
		"/v1/workspaces/ws_1/dir":        map[string]any{"path": "", "entries": []any{}},
		"/v1/workspaces/ws_1/trajectory": map[string]any{"operations": []any{}},
	}}
	parts := []string{`data-workspace="ws_1"`, `id="term-open"`, `id="term-box"`, `src="/assets/terminal.js"`, `href="/assets/vendor/xterm/xterm.css"`}
	checkPage(t, api, "/workspaces/ws_1", parts...)
	api.answers["/v1/auth/me"] = map[string]any{"kind": "apiKey", "keyName": "k", "grants": []string{"workspaces:read"}}
	body := checkPage(t, api, "/workspaces/ws_1", "workspaces:exec")
	for _, p := range parts[1:] {
		if strings.Contains(body, p) {
			t.Errorf("a key without workspaces:exec gets the terminal's %s", p)
		}
	}

	c := New(&fakeAPI{}, slog.New(slog.DiscardHandler))
	for _, a := range []struct{ path, ctype, holds string }{
		{"/assets/terminal.js", "javascript", `from "./vendor/xterm/xterm.mjs"`},
		{"/assets/vendor/xterm/xterm.mjs", "javascript", "as Terminal}"},
		{"/assets/vendor/xterm/addon-fit.mjs", "javascript", "as FitAddon}"},
		{"/assets/vendor/xterm/xterm.css", "text/css", ".xterm"},
		{"/assets/vendor/xterm/LICENSE", "", "The xterm.js authors"},
		{"/assets/terminal.css", "text/css", ".term-box"},
	} {
		rec := get(t, c, a.path)
		data, _ := io.ReadAll(rec.Body)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Header().Get("Content-Type"), a.ctype) || !strings.Contains(string(data), a.holds) {
			t.Errorf("GET %s = %d %q (%d bytes), want %s holding %q", a.path, rec.Code, rec.Header().Get("Content-Type"), len(data), a.ctype, a.holds)
		}
	}
}
