package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/apikeys"
)

// TestReplayAPI: POST /v1/runs/{id}/replay makes a new run of the task
// with the original's payload and tags unless the body edits them, linked
// by replayOf; a key of another environment cannot see the original.
func TestReplayAPI(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	st, orig := e.call("POST", "/v1/tasks/a/runs?project=p&env=dev", `{"payload": {"n": 1}, "tags": ["t1"], "priority": 5}`)
	if st != http.StatusCreated {
		t.Fatalf("trigger = %d %v", st, orig)
	}
	id := orig["id"].(string)

	st, same := e.call("POST", "/v1/runs/"+id+"/replay", nil)
	if st != http.StatusCreated || same["replayOf"] != id || same["id"] == id {
		t.Fatalf("replay (no body) = %d %v, want a new run with replayOf %s", st, same, id)
	}
	if p := same["payload"].(map[string]any); p["n"] != 1.0 || !equalJSONList(same["tags"], "t1") || same["priority"] != 5.0 {
		t.Errorf("replay = payload %v tags %v priority %v, want the original's", same["payload"], same["tags"], same["priority"])
	}
	st, edited := e.call("POST", "/v1/runs/"+id+"/replay", `{"payload": {"n": 2}, "tags": ["t2", "t3"]}`)
	if st != http.StatusCreated || edited["payload"].(map[string]any)["n"] != 2.0 || !equalJSONList(edited["tags"], "t2", "t3") || edited["priority"] != 5.0 {
		t.Errorf("replay (edited) = %d %v", st, edited)
	}

	before := e.rows()["runs"]
	for _, c := range []struct {
		name, body string
		want       int
	}{
		{"an unknown field", `{"payloadd": 1}`, http.StatusBadRequest},
		{"a bad tag", `{"tags": ["a b"]}`, http.StatusBadRequest},
		{"a bad ttl", `{"ttl": "soon"}`, http.StatusBadRequest},
		{"a missing workspace", `{"workspaceId": "ws_missing"}`, http.StatusNotFound},
	} {
		if st, body := e.call("POST", "/v1/runs/"+id+"/replay", c.body); st != c.want {
			t.Errorf("replay with %s = %d %v, want %d", c.name, st, body, c.want)
		}
	}
	prodKey, _ := e.key("p", "prod", apikeys.Grants...)
	if st, body := e.call("POST", "/v1/runs/"+id+"/replay", nil, "Authorization", "Bearer "+prodKey); st != http.StatusNotFound {
		t.Errorf("replay with a key of p/prod = %d %v, want 404", st, body)
	}
	if st, body := e.call("POST", "/v1/runs/run_missing/replay", nil); st != http.StatusNotFound {
		t.Errorf("replay of a missing run = %d %v, want 404", st, body)
	}
	if n := e.rows()["runs"]; n != before {
		t.Errorf("refused replays stored %d runs", n-before)
	}
}

// TestBulkAPI: bulk cancel and replay act on the request's project
// environment only: a key of another environment is refused on this one
// and touches nothing from its own; bad filters are 400s.
func TestBulkAPI(t *testing.T) {
	e := newAPI(t)
	for _, env := range []string{"dev", "prod"} {
		d := deployment(goodTask("a"))
		d["env"] = env
		if st, body := e.call("POST", "/v1/deployments", d); st != http.StatusCreated {
			t.Fatalf("deploy %s = %d %v", env, st, body)
		}
	}
	var ids []string
	for range 3 {
		st, r := e.call("POST", "/v1/tasks/a/runs?project=p&env=dev", `{"payload": 1, "tags": ["bulk"]}`)
		if st != http.StatusCreated {
			t.Fatalf("trigger = %d %v", st, r)
		}
		ids = append(ids, r["id"].(string))
	}
	statusOf := func(id string) string {
		_, r := e.call("GET", "/v1/runs/"+id, nil)
		return r["status"].(string)
	}

	prodKey, _ := e.key("p", "prod", apikeys.Grants...)
	if st, body := e.call("POST", "/v1/runs/bulk/cancel?project=p&env=dev", `{"tag": "bulk"}`, "Authorization", "Bearer "+prodKey); st != http.StatusForbidden {
		t.Errorf("bulk cancel of p/dev with a key of p/prod = %d %v, want 403", st, body)
	}
	st, res := e.call("POST", "/v1/runs/bulk/cancel?project=p&env=prod", map[string]any{"tag": "bulk", "ids": ids}, "Authorization", "Bearer "+prodKey)
	if st != http.StatusOK || res["matched"] != 0.0 || res["counts"].(map[string]any)["not_found"] != 3.0 {
		t.Errorf("bulk cancel in p/prod naming p/dev's runs = %d %v, want 3 not found", st, res)
	}
	for _, id := range ids {
		if s := statusOf(id); s != "QUEUED" {
			t.Errorf("run %s is %s after another environment's bulk cancel", id, s)
		}
	}

	for _, c := range []struct{ name, body string }{
		{"no filter", `{}`},
		{"a filter of limit only", `{"limit": 5}`},
		{"an unknown status", `{"status": "DONE"}`},
		{"a bad since", `{"since": "yesterday"}`},
		{"since after until", `{"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}`},
		{"a limit over 1000", `{"task": "a", "limit": 1001}`},
		{"a bad cursor", `{"task": "a", "cursor": "nope"}`},
		{"ids and a cursor", `{"ids": ["run_x"], "cursor": "abc"}`},
		{"an unknown field", `{"tasks": "a"}`},
		{"overrides on a cancel", `{"task": "a", "overrides": {"payload": 1}}`},
	} {
		if st, body := e.call("POST", "/v1/runs/bulk/cancel?project=p&env=dev", c.body); st != http.StatusBadRequest {
			t.Errorf("bulk cancel with %s = %d %v, want 400", c.name, st, body)
		}
	}
	for _, c := range []struct{ name, body string }{
		{"a workspace", `{"task": "a", "overrides": {"workspaceId": "ws_1"}}`},
		{"an idempotency key", `{"task": "a", "overrides": {"idempotencyKey": "k"}}`},
		{"a bad delay", `{"task": "a", "overrides": {"delay": "later"}}`},
	} {
		if st, body := e.call("POST", "/v1/runs/bulk/replay?project=p&env=dev", c.body); st != http.StatusBadRequest {
			t.Errorf("bulk replay with %s = %d %v, want 400", c.name, st, body)
		}
	}

	// Cancel all three, two a call; the third call finds them ended.
	st, first := e.call("POST", "/v1/runs/bulk/cancel?project=p&env=dev", `{"tag": "bulk", "status": "QUEUED", "limit": 2}`)
	if st != http.StatusOK || first["matched"] != 2.0 || first["more"] != true || first["nextCursor"] == nil {
		t.Fatalf("bulk cancel page 1 = %d %v", st, first)
	}
	st, second := e.call("POST", "/v1/runs/bulk/cancel?project=p&env=dev", map[string]any{"tag": "bulk", "status": "QUEUED", "limit": 2, "cursor": first["nextCursor"]})
	if st != http.StatusOK || second["matched"] != 1.0 || second["more"] != false {
		t.Fatalf("bulk cancel page 2 = %d %v", st, second)
	}
	st, again := e.call("POST", "/v1/runs/bulk/cancel?project=p&env=dev", `{"tag": "bulk"}`)
	if st != http.StatusOK || again["counts"].(map[string]any)["skipped"] != 3.0 {
		t.Errorf("bulk cancel of ended runs = %d %v, want 3 skipped", st, again)
	}

	// Replay them with an edited payload.
	st, rep := e.call("POST", "/v1/runs/bulk/replay?project=p&env=dev", `{"tag": "bulk", "status": "CANCELED", "overrides": {"payload": {"edited": true}}}`)
	if st != http.StatusOK || rep["counts"].(map[string]any)["replayed"] != 3.0 {
		t.Fatalf("bulk replay = %d %v", st, rep)
	}
	for _, it := range rep["runs"].([]any) {
		item := it.(map[string]any)
		_, nr := e.call("GET", "/v1/runs/"+item["newRunId"].(string), nil)
		if nr["replayOf"] != item["runId"] || nr["payload"].(map[string]any)["edited"] != true || nr["status"] != "QUEUED" {
			t.Errorf("replay %v of %v = %v", item["newRunId"], item["runId"], nr)
		}
	}
	if st, body := e.call("POST", "/v1/runs/bulk/replay?project=p&env=dev", `{"tag": "bulk"}`, "Authorization", "Bearer "+prodKey); st != http.StatusForbidden || !strings.Contains(errMessage(body), "scoped to p/prod") {
		t.Errorf("bulk replay of p/dev with a key of p/prod = %d %v, want 403", st, body)
	}
}

// equalJSONList reports whether v (decoded JSON) is the list of strings want.
func equalJSONList(v any, want ...string) bool {
	l, ok := v.([]any)
	if !ok || len(l) != len(want) {
		return false
	}
	for i, w := range want {
		if l[i] != w {
			return false
		}
	}
	return true
}
