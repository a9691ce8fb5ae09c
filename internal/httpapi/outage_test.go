package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestStoreOutageIsNotANotFound: a task lookup that fails because the
// database is gone is a 5xx (a client may retry), never a 404 that says
// the task does not exist.
func TestStoreOutageIsNotANotFound(t *testing.T) {
	e := newAPI(t)
	if st, body := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, body)
	}
	if st, _ := e.call("POST", "/v1/tasks/nope/runs?project=p", `{"payload": 1}`); st != http.StatusNotFound {
		t.Fatalf("trigger an unknown task before the outage = %d, want 404", st)
	}
	if err := e.st.Close(); err != nil { // the database goes away
		t.Fatal(err)
	}
	st, body := e.call("POST", "/v1/tasks/a/runs?project=p", `{"payload": 1}`)
	if st < 500 {
		t.Errorf("trigger with the store closed = %d %v, want a 5xx", st, body)
	}
	if msg, _ := body["error"].(map[string]any)["message"].(string); strings.Contains(msg, "not found") {
		t.Errorf("trigger with the store closed says %q, want no \"not found\"", msg)
	}
}
