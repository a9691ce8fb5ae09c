package console

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeAPI answers the API's routes the console reads from a table, and
// records the credentials each request came with.
type fakeAPI struct {
	answers map[string]any
	status  map[string]int
	cookies []string
	paths   []string // every request's path and query, in order
	posts   []string // the bodies of non-GET requests
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.cookies = append(f.cookies, r.Header.Get("Cookie"))
	f.paths = append(f.paths, r.URL.RequestURI())
	key := r.URL.Path
	if st, ok := f.status[key]; ok {
		w.WriteHeader(st)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "x", "message": "refused: " + key}})
		return
	}
	v, ok := f.answers[key]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "not_found", "message": "no " + key}})
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("Cookie", "helmr_session=s1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestRunsPageRendersDataAsText: what the API answers is shown, as text
// (a task name holding markup is escaped), with the request's cookie
// passed on, under the console's Content-Security-Policy.
func TestRunsPageRendersDataAsText(t *testing.T) {
	api := &fakeAPI{answers: map[string]any{
		"/v1/auth/me": map[string]any{"kind": "owner"},
		"/v1/runs": map[string]any{"runs": []map[string]any{
			{"id": "run_1", "taskId": `<script>alert(1)</script>`, "kind": "task", "status": "WAITING", "createdAt": "2026-11-25T04:00:00Z"},
		}, "nextCursor": "c2"},
	}}
	c := New(api, slog.New(slog.DiscardHandler))
	rec := get(t, c, "/runs?project=p&env=dev")
	body := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.Contains(body, "run_1") || !strings.Contains(body, "WAITING") {
		t.Fatalf("GET /runs = %d %s", rec.Code, body)
	}
	if strings.Contains(body, "<script>alert(1)") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the task name is not escaped: %s", body)
	}
	if !strings.Contains(body, `href="/runs?cursor=c2&amp;env=dev&amp;project=p"`) {
		t.Errorf("no link to the next page: %s", body)
	}
	if rec.Header().Get("Content-Security-Policy") != CSP || !strings.Contains(CSP, "script-src 'self'") || rec.Header().Get("X-Frame-Options") != "DENY" {
		t.Errorf("headers = %v", rec.Header())
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, "style=") {
		t.Errorf("the page has an inline script or style: %s", body)
	}
	for _, ck := range api.cookies {
		if ck != "helmr_session=s1" {
			t.Errorf("an API request went without the session's cookie: %q", ck)
		}
	}
}

func TestSignedOutGoesToSignIn(t *testing.T) {
	api := &fakeAPI{status: map[string]int{"/v1/auth/me": http.StatusUnauthorized}}
	rec := get(t, New(api, slog.New(slog.DiscardHandler)), "/runs?project=p")
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/login?next=%2Fruns%3Fproject%3Dp" {
		t.Errorf("GET /runs signed out = %d %v", rec.Code, rec.Header())
	}
}

func TestAPIErrorPage(t *testing.T) {
	api := &fakeAPI{answers: map[string]any{"/v1/auth/me": map[string]any{"kind": "owner"}}, status: map[string]int{"/v1/runs": http.StatusForbidden}}
	rec := get(t, New(api, slog.New(slog.DiscardHandler)), "/runs?project=p")
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "refused: /v1/runs") {
		t.Errorf("GET /runs refused by the API = %d %s", rec.Code, rec.Body)
	}
}

func TestAssetsServed(t *testing.T) {
	c := New(&fakeAPI{}, slog.New(slog.DiscardHandler))
	for _, p := range []string{"/assets/console.js", "/assets/console.css"} {
		rec := get(t, c, p)
		data, _ := io.ReadAll(rec.Body)
		if rec.Code != http.StatusOK || len(data) == 0 {
			t.Errorf("GET %s = %d (%d bytes)", p, rec.Code, len(data))
		}
	}
}
