package console

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func fakeRuns() *fakeAPI {
	return &fakeAPI{answers: map[string]any{
		"/v1/auth/me": map[string]any{"kind": "owner"},
		"/v1/projects": map[string]any{"environments": []map[string]any{
			{"project": "p", "env": "dev"}, {"project": "p", "env": "prod"},
		}},
		"/v1/runs": map[string]any{"runs": []map[string]any{
			{"id": "run_1", "taskId": "t", "kind": "task", "status": "RUNNING", "createdAt": "2026-11-25T04:00:00Z", "startedAt": "2026-11-25T04:00:01Z"},
		}},
	}}
}

// TestRunsFiltersReachTheAPI: the list's filters become GET /v1/runs's
// parameters (the time window as since, the id search as id).
func TestRunsFiltersReachTheAPI(t *testing.T) {
	api := fakeRuns()
	c := New(api, slog.New(slog.DiscardHandler))
	rec := get(t, c, "/runs?project=p&env=prod&status=FAILED&task=t&kind=build&window=24h&id=run_1")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /runs = %d %s", rec.Code, rec.Body)
	}
	i := slices.IndexFunc(api.paths, func(p string) bool { return strings.HasPrefix(p, "/v1/runs?") })
	if i < 0 {
		t.Fatalf("no GET /v1/runs among %v", api.paths)
	}
	for _, want := range []string{"project=p", "env=prod", "status=FAILED", "task=t", "kind=build", "since=", "id=run_1"} {
		if !strings.Contains(api.paths[i], want) {
			t.Errorf("GET %s lacks %s", api.paths[i], want)
		}
	}
	body := rec.Body.String()
	for _, want := range []string{`<option value="24h" selected>`, `value="run_1"`, `<option value="p/prod" selected>`, `data-live="rows"`, `src="/assets/live.js"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s:\n%s", want, body)
		}
	}
	if rec := get(t, c, "/runs?project=p&window=forever"); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "unknown time window") {
		t.Errorf("GET /runs?window=forever = %d %s", rec.Code, rec.Body)
	}
}

// TestRunsLiveFragment: a request for the rows fragment gets the table's
// rows alone, no layout; an older page (a cursor) does not refresh itself.
func TestRunsLiveFragment(t *testing.T) {
	c := New(fakeRuns(), slog.New(slog.DiscardHandler))
	req := httptest.NewRequest("GET", "/runs?project=p&env=dev", nil)
	req.Header.Set(FragmentHeader, "rows")
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	body := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.HasPrefix(strings.TrimSpace(body), "<tr>") || strings.Contains(body, "<html") || !strings.Contains(body, "run_1") {
		t.Errorf("GET /runs as the rows fragment = %d %s", rec.Code, body)
	}
	req.Header.Set(FragmentHeader, "layout")
	rec = httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /runs as the layout fragment = %d, want 404", rec.Code)
	}
	if rec := get(t, c, "/runs?project=p&cursor=abc"); strings.Contains(rec.Body.String(), "data-live") {
		t.Errorf("an older page refreshes itself: %s", rec.Body)
	}
}

// TestScopeSelector: choosing project/env in the layout's selector lands
// on the same page for that project environment.
func TestScopeSelector(t *testing.T) {
	c := New(fakeRuns(), slog.New(slog.DiscardHandler))
	rec := get(t, c, "/runs?scope=p%2Fprod&status=FAILED&cursor=x")
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/runs?env=prod&project=p&status=FAILED" {
		t.Errorf("GET /runs?scope=p/prod = %d %v", rec.Code, rec.Header())
	}
}
