package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/helmr/helmr/internal/httpapi"
)

// TestE2BMount: the E2B API answers under /e2b, with the prefix taken off
// (E2B_API_URL=http://HOST/e2b), and nothing else of the API reaches it.
func TestE2BMount(t *testing.T) {
	var got []string
	e2b := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path)
		w.WriteHeader(http.StatusTeapot)
	})
	srv := httpapi.New(httpapi.Config{E2B: e2b})
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"POST", "/e2b/v2/sandboxes", http.StatusTeapot},
		{"DELETE", "/e2b/sandboxes/ws_1", http.StatusTeapot},
		{"GET", "/v1/health", http.StatusOK},
	} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.want {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.path, rec.Code, tc.want)
		}
	}
	if want := "[POST /v2/sandboxes DELETE /sandboxes/ws_1]"; fmt.Sprint(got) != want {
		t.Errorf("the E2B handler saw %v, want %s", got, want)
	}
	rec := httptest.NewRecorder()
	httpapi.New(httpapi.Config{}).ServeHTTP(rec, httptest.NewRequest("POST", "/e2b/v2/sandboxes", nil))
	if rec.Code == http.StatusTeapot || rec.Code < 400 {
		t.Errorf("POST /e2b/v2/sandboxes without E2B = %d, want an error", rec.Code)
	}
}
