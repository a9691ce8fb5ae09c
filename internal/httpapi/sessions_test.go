package httpapi_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSessionAPI: appends with idempotency keys, refusals, an SSE read
// that resumes from Last-Event-ID, the worker's metadata in GET
// /v1/runs/{id}, and the end of a stream once its run ended.
func TestSessionAPI(t *testing.T) {
	e := newAPI(t)
	if st, body := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, body)
	}
	id, _ := e.waitingRun(t)
	path := "/v1/runs/" + id + "/session/"
	for i, c := range []struct {
		stream, body, key string
		want              int
		wantSeq           float64
	}{
		{"input", `{"data": {"text": "a"}}`, "k1", 201, 1},
		{"input", `{"data":{"text":"a"}}`, "k1", 200, 1}, // a retry: the same data, however spelled
		{"input", `{"data": {"text": "b"}}`, "k1", 409, 0},
		{"input", `{"data": null, "idempotencyKey": "k2"}`, "", 201, 2},
		{"input", `{"data": 1, "idempotencyKey": "k3"}`, "k4", 400, 0},
		{"input", `{}`, "", 400, 0},
		{"input", `{"data": 1, "extra": 2}`, "", 400, 0},
		{"output", `{"data": "x"}`, "k1", 201, 1}, // streams count apart
	} {
		st, body := e.call("POST", path+c.stream, c.body, "Idempotency-Key", c.key)
		if st != c.want || (c.wantSeq > 0 && body["seq"] != c.wantSeq) {
			t.Errorf("append %d to %s %s (key %q) = %d %v, want %d with seq %v", i, c.stream, c.body, c.key, st, body, c.want, c.wantSeq)
		}
	}
	if st, _ := e.call("POST", "/v1/runs/run_missing/session/input", `{"data": 1}`); st != http.StatusNotFound {
		t.Errorf("append to an unknown run = %d, want 404", st)
	}

	// The worker sets metadata; the run API shows it.
	w := []string{"Authorization", "Bearer wtok"}
	if st, body := e.call("POST", "/v1/worker/runs/"+id+"/metadata", `{"key": "progress", "value": {"done": 2}}`, w...); st != http.StatusNoContent {
		t.Fatalf("set metadata = %d %v", st, body)
	}
	if st, body := e.call("POST", "/v1/worker/runs/"+id+"/metadata", `{"key": "", "value": 1}`, w...); st != http.StatusBadRequest {
		t.Errorf("set metadata with an empty key = %d %v, want 400", st, body)
	}
	_, run := e.call("GET", "/v1/runs/"+id, nil)
	if md, _ := run["metadata"].(map[string]any); md == nil || md["progress"].(map[string]any)["done"] != 2.0 {
		t.Errorf("GET /v1/runs/%s metadata = %v, want progress {done: 2}", id, run["metadata"])
	}
	// The worker reads the input from a cursor.
	_, page := e.call("GET", "/v1/worker/runs/"+id+"/session/input?after=1", nil, w...)
	if recs, _ := page["records"].([]any); len(recs) != 1 || recs[0].(map[string]any)["seq"] != 2.0 {
		t.Errorf("worker input after 1 = %v, want record 2", page)
	}

	// SSE from Last-Event-ID 1: record 2, then (after the run ends) the end.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path+"input/stream", nil)
	req.Header.Set("Authorization", "Bearer "+e.owner)
	req.Header.Set("Last-Event-ID", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream = %v, %v", resp, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for sc.Scan() && len(lines) < 3 {
		lines = append(lines, sc.Text())
	}
	if got := strings.Join(lines, "\n"); !strings.HasPrefix(got, "id: 2\nevent: record\ndata: {") || !strings.Contains(got, `"seq":2`) {
		t.Fatalf("stream from Last-Event-ID 1 began %q, want record 2", got)
	}
	if st, body := e.call("POST", "/v1/runs/"+id+"/cancel", nil); st != http.StatusOK {
		t.Fatalf("cancel = %d %v", st, body)
	}
	var rest []string
	for sc.Scan() {
		rest = append(rest, sc.Text())
	}
	if got := strings.Join(rest, "\n"); !strings.Contains(got, "event: end") || strings.Contains(got, "event: record") {
		t.Errorf("stream after the run ended = %q, want its end and no record", got)
	}
	if st, _ := e.call("POST", path+"input", `{"data": 3}`); st != http.StatusConflict {
		t.Errorf("append to a canceled run = %d, want 409", st)
	}
	if st, body := e.call("POST", path+"input", `{"data": {"text": "a"}}`, "Idempotency-Key", "k1"); st != http.StatusOK || body["seq"] != 1.0 {
		t.Errorf("retry of k1 after the run ended = %d %v, want 200 with record 1", st, body)
	}
}
