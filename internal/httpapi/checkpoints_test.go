package httpapi_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/errdefs"
)

// raw sends body as a worker with token and returns the status and body.
func (e *apiEnv) raw(method, path, token string, body []byte) (int, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// TestWorkerCheckpointRoutes: a worker uploads a checkpoint of a run it
// holds and downloads it once recorded, byte for byte; other runs, other
// workers' credentials, unrecorded and malformed ids are refused.
func TestWorkerCheckpointRoutes(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	runID, wpID := e.waitingRun(t)
	other, _ := e.waitingRun(t)
	blob := bytes.Repeat([]byte("sealed checkpoint bytes "), 100000)
	path := "/v1/worker/runs/" + runID + "/checkpoints/ck_01"

	if st, body := e.raw("PUT", path, "wtok", blob); st != http.StatusOK || !strings.Contains(string(body), `"size":2400000`) {
		t.Fatalf("PUT checkpoint = %d %s, want 200 with its size", st, body)
	}
	if st, body := e.raw("GET", path, "wtok", nil); st != http.StatusNotFound {
		t.Errorf("GET unrecorded checkpoint = %d %s, want 404", st, body)
	}
	ck := checkpoints.Checkpoint{ID: "ck_01", RunID: runID, WaitpointID: wpID, ExecID: 9, RequestID: 1,
		Arch: "amd64", Tier: "gvisor", Kernel: "kernel:runsc@sha256:aa", Size: int64(len(blob)), CreatedAt: time.Now()}
	if err := e.st.CreateCheckpoint(t.Context(), ck); err != nil {
		t.Fatal(err)
	}
	if st, body := e.raw("GET", path, "wtok", nil); st != http.StatusOK || !bytes.Equal(body, blob) {
		t.Errorf("GET checkpoint = %d, %d bytes; want 200 and the %d uploaded", st, len(body), len(blob))
	}
	// Through another run's path: hidden. Uploading over it from another
	// run: a conflict, and the blob is unchanged.
	if st, _ := e.raw("GET", "/v1/worker/runs/"+other+"/checkpoints/ck_01", "wtok", nil); st != http.StatusNotFound {
		t.Errorf("GET through another run = %d, want 404", st)
	}
	if st, _ := e.raw("PUT", "/v1/worker/runs/"+other+"/checkpoints/ck_01", "wtok", []byte("evil")); st != http.StatusConflict {
		t.Errorf("PUT over another run's checkpoint = %d, want 409", st)
	}
	if rc, err := e.blobs.Get(t.Context(), "ck_01"); err == nil {
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, blob) {
			t.Errorf("blob changed by a refused PUT: %d bytes", len(got))
		}
	}
	if st, body := e.raw("PUT", "/v1/worker/runs/"+runID+"/checkpoints/..%2Fx", "wtok", blob); st != http.StatusBadRequest && st != http.StatusNotFound {
		t.Errorf("PUT malformed id = %d %s, want 400 or 404", st, body)
	}
	// The blob store also keeps workspace snapshots: a run's worker may not
	// write one under the checkpoint route.
	for _, id := range []string{"wss_01", "wsck_01", "ck_A"} {
		if st, body := e.raw("PUT", "/v1/worker/runs/"+runID+"/checkpoints/"+id, "wtok", blob); st != http.StatusBadRequest {
			t.Errorf("PUT checkpoint %s = %d %s, want 400", id, st, body)
		}
		if _, err := e.blobs.Get(t.Context(), id); err == nil {
			t.Errorf("PUT checkpoint %s stored a blob", id)
		}
	}
	// A worker credential whose workers do not hold the run sees nothing.
	st, wc := e.call("POST", "/v1/apikeys/worker", `{"name": "w"}`)
	if st != http.StatusCreated {
		t.Fatalf("create worker credential = %d %v", st, wc)
	}
	if st, _ := e.raw("GET", path, wc["key"].(string), nil); st != http.StatusNotFound {
		t.Errorf("GET with another worker's credential = %d, want 404", st)
	}
	if st, _ := e.raw("GET", path, e.owner, nil); st != http.StatusUnauthorized {
		t.Errorf("GET with the owner credential = %d, want 401", st)
	}

	// The remote worker's client streams both ways.
	cp := client.Worker{C: client.New(e.srv.URL, "wtok")}
	if n, err := cp.PutCheckpoint(t.Context(), runID, "ck_02", bytes.NewReader(blob)); err != nil || n != int64(len(blob)) {
		t.Fatalf("client PutCheckpoint() = %d, %v", n, err)
	}
	ck.ID = "ck_02"
	if err := e.st.CreateCheckpoint(t.Context(), ck); err != nil {
		t.Fatal(err)
	}
	rc, err := cp.GetCheckpoint(t.Context(), runID, "ck_02")
	if err != nil {
		t.Fatalf("client GetCheckpoint() = %v", err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, blob) {
		t.Errorf("client GetCheckpoint() = %d bytes, want %d", len(got), len(blob))
	}
	if _, err := cp.GetCheckpoint(t.Context(), other, "ck_02"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("client GetCheckpoint(another run) = %v, want not found", err)
	}
}

// TestParkAndRequeue: a worker parks a WAITING run (checkpoint uploaded,
// then recorded); the run stays WAITING with a "parked" event and is not
// failed when its worker goes silent; approving it queues it again, and
// its next lease carries the checkpoint, which the restoring worker marks
// restored (it is kept until the run ends or parks again).
func TestParkAndRequeue(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	runID, wpID := e.waitingRun(t)
	w := []string{"Authorization", "Bearer wtok"}
	blob := []byte("HELMRCK1 sealed")
	ck := map[string]any{"id": "ck_01", "runId": runID, "waitpointId": wpID, "execId": 4, "requestId": 2,
		"arch": "amd64", "tier": "gvisor", "kernel": "kernel:runsc@sha256:aa", "rootfs": "", "size": len(blob), "createdAt": time.Now()}
	park := map[string]any{"checkpoint": ck, "note": map[string]any{"message": "parked: checkpoint ck_01 (0 MiB)"}}
	// Recording before the upload is refused.
	if st, body := e.call("POST", "/v1/worker/runs/"+runID+"/park", park, w...); st < 400 {
		t.Errorf("park before upload = %d %v, want an error", st, body)
	}
	if st, body := e.raw("PUT", "/v1/worker/runs/"+runID+"/checkpoints/ck_01", "wtok", blob); st != http.StatusOK {
		t.Fatalf("PUT = %d %s", st, body)
	}
	if st, body := e.call("POST", "/v1/worker/runs/"+runID+"/park", park, w...); st != http.StatusNoContent {
		t.Fatalf("park = %d %v", st, body)
	}
	st, run := e.call("GET", "/v1/runs/"+runID, nil)
	if st != http.StatusOK || run["status"] != "WAITING" {
		t.Fatalf("parked run = %d %v, want WAITING", st, run)
	}
	if n, err := e.svc.FailOrphans(t.Context(), "orphaned"); err != nil || n != 0 {
		t.Errorf("FailOrphans() = %d, %v; want the parked run left alone", n, err)
	}
	if st, body := e.call("POST", "/v1/runs/"+runID+"/approve", `{"data": {"ok": true}}`); st != http.StatusOK {
		t.Fatalf("approve = %d %v", st, body)
	}
	if _, run = e.call("GET", "/v1/runs/"+runID, nil); run["status"] != "QUEUED" {
		t.Fatalf("after approve, run = %v, want QUEUED for restore", run["status"])
	}
	st, lease := e.call("POST", "/v1/worker/lease", `{"workerId": "w2"}`, w...)
	restore, _ := lease["restore"].(map[string]any)
	if st != http.StatusOK || restore["id"] != "ck_01" || restore["execId"] != float64(4) {
		t.Fatalf("lease = %d %v, want the run with restore ck_01", st, lease)
	}
	if st, body := e.call("POST", "/v1/worker/runs/"+runID+"/checkpoints/ck_01/restored", nil, w...); st != http.StatusNoContent {
		t.Errorf("restored = %d %v", st, body)
	}
	if st, body := e.call("POST", "/v1/worker/runs/"+runID+"/checkpoints/ck_none/restored", nil, w...); st != http.StatusNotFound {
		t.Errorf("restored (unknown checkpoint) = %d %v, want 404", st, body)
	}
	// Kept, restored, for a retry should this worker be lost.
	if ck, err := e.st.GetCheckpoint(t.Context(), "ck_01"); err != nil || ck.RestoredAt == nil {
		t.Errorf("checkpoint after the restore = %+v, %v; want it kept, restored", ck, err)
	}
	if rc, err := e.blobs.Get(t.Context(), "ck_01"); err != nil {
		t.Errorf("blob after the restore: %v, want kept", err)
	} else {
		rc.Close()
	}
	_, evs := e.call("GET", "/v1/runs/"+runID+"/events", nil)
	text := fmt.Sprint(evs)
	for _, want := range []string{"parked: checkpoint ck_01", "queued to restore from checkpoint ck_01"} {
		if !strings.Contains(text, want) {
			t.Errorf("events lack %q: %s", want, text)
		}
	}
}
