package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/helmr/helmr/internal/apikeys"
)

// testDoctor stands in for helmr doctor's report of the host (package
// cli checks the real host).
func testDoctor(context.Context) any {
	return map[string]any{
		"tiers":  []map[string]any{{"name": "process", "available": true, "reason": "", "isolation": "none"}, {"name": "gvisor", "available": false, "reason": "runsc <not found>", "isolation": "user-space kernel"}},
		"policy": "auto", "selected": "process",
		"egress":         map[string]any{"policy": "none", "ok": true, "detail": "sandboxes have loopback only"},
		"workspaceQuota": map[string]any{"quota": "0", "ok": true, "detail": "none"},
	}
}

// TestWorkersAPI: a worker that leased a run is listed with its
// capabilities, a slot in use and the run; asked for another project
// environment, the slot is counted but the run not listed; a key
// without runs:read is refused.
func TestWorkersAPI(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	runID, _ := e.waitingRun(t)
	w := []string{"Authorization", "Bearer wtok"}
	hb := `{"workerId": "wfix", "capabilities": {"arch": "amd64", "tiers": ["process", "gvisor"], "slots": 4, "cpus": 2, "memoryBytes": 1073741824, "host": "h1"}}`
	if st, body := e.call("POST", "/v1/worker/heartbeat", hb, w...); st != http.StatusNoContent {
		t.Fatalf("heartbeat = %d %v", st, body)
	}
	st, body := e.call("GET", "/v1/workers?project=p&env=dev", nil)
	if st != http.StatusOK {
		t.Fatalf("GET /v1/workers = %d %v", st, body)
	}
	list := body["workers"].([]any)
	if len(list) != 1 {
		t.Fatalf("workers = %v, want one", list)
	}
	wk := list[0].(map[string]any)
	caps := wk["capabilities"].(map[string]any)
	if wk["id"] != "wfix" || wk["live"] != true || wk["slotsInUse"] != float64(1) || caps["host"] != "h1" || caps["slots"] != float64(4) || len(caps["tiers"].([]any)) != 2 {
		t.Errorf("worker = %v", wk)
	}
	held := wk["runs"].([]any)
	if len(held) != 1 || held[0].(map[string]any)["id"] != runID || held[0].(map[string]any)["status"] != "WAITING" {
		t.Errorf("held runs = %v, want %s WAITING", held, runID)
	}

	other, _ := e.key("q", "dev", apikeys.RunsRead)
	st, body = e.call("GET", "/v1/workers?project=q&env=dev", nil, "Authorization", "Bearer "+other)
	if st != http.StatusOK {
		t.Fatalf("GET /v1/workers as a key of q/dev = %d %v", st, body)
	}
	wk = body["workers"].([]any)[0].(map[string]any)
	if wk["slotsInUse"] != float64(1) || len(wk["runs"].([]any)) != 0 {
		t.Errorf("a key of q/dev sees worker %v; want the slot counted and no run of p/dev", wk)
	}
	noRead, _ := e.key("p", "dev", apikeys.TasksRead)
	if st, body := e.call("GET", "/v1/workers?project=p&env=dev", nil, "Authorization", "Bearer "+noRead); st != http.StatusForbidden {
		t.Errorf("GET /v1/workers without runs:read = %d %v, want 403", st, body)
	}
}

// TestDoctorAPI: the owner reads the doctor's report; an API key, with
// whatever grants, is refused.
func TestDoctorAPI(t *testing.T) {
	e := newAPI(t)
	st, body := e.call("GET", "/v1/doctor", nil)
	if st != http.StatusOK || body["selected"] != "process" || len(body["tiers"].([]any)) != 2 {
		t.Fatalf("GET /v1/doctor = %d %v", st, body)
	}
	all := make([]apikeys.Grant, len(apikeys.Grants))
	copy(all, apikeys.Grants)
	k, _ := e.key("p", "dev", all...)
	if st, body := e.call("GET", "/v1/doctor", nil, "Authorization", "Bearer "+k); st != http.StatusForbidden {
		t.Errorf("GET /v1/doctor with an API key = %d %v, want 403", st, body)
	}
}
