package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/workers"
	"github.com/helmr/helmr/internal/workspaces"
)

// TestWorkerSnapshotRoutes: a worker of the host a workspace is on
// uploads its snapshots, each following the latest (the one it replaces
// is deleted), and downloads the latest; a worker of another host, a
// worker the credential may not act as, an unknown worker and a stale
// number are refused; deleting the workspace deletes its snapshot.
func TestWorkerSnapshotRoutes(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	st, wc := e.call("POST", "/v1/apikeys/worker", `{"name": "w"}`)
	if st != http.StatusCreated {
		t.Fatalf("create worker credential = %d %v", st, wc)
	}
	cred := wc["key"].(string)
	prefix := wc["apiKey"].(map[string]any)["id"].(string)
	workerA, workerB := prefix+".a", prefix+".b"
	st, r := e.call("POST", "/v1/tasks/a/runs?project=p&env=dev", `{"payload": 1}`)
	if st != http.StatusCreated {
		t.Fatalf("trigger = %d %v", st, r)
	}
	runID, ws := r["id"].(string), r["workspaceId"].(string)
	caps := workers.Capabilities{CPUs: 4, MemoryBytes: 8 << 30, Host: "hA"}
	if l, err := e.svc.Lease(t.Context(), workerA, caps); err != nil || l.ID != runID {
		t.Fatalf("Lease(%s) = %s, %v", workerA, l.ID, err)
	}
	caps.Host = "hB"
	if err := e.svc.Heartbeat(t.Context(), workerB, caps); err != nil {
		t.Fatal(err)
	}
	path := func(worker string, seq int) string {
		return fmt.Sprintf("/v1/worker/workspaces/%s/snapshots/%d?workerId=%s", ws, seq, worker)
	}
	one, two := bytes.Repeat([]byte("sealed snapshot one "), 50000), []byte("sealed snapshot two")
	if st, body := e.raw("PUT", path(workerA, 1), cred, one); st != http.StatusOK {
		t.Fatalf("PUT snapshot 1 = %d %s", st, body)
	}
	got, err := e.st.GetWorkspace(t.Context(), ws)
	if err != nil || got.Snapshot == nil || got.Snapshot.Seq != 1 || got.Snapshot.Size != int64(len(one)) {
		t.Fatalf("workspace after snapshot 1 = %+v, %v", got.Snapshot, err)
	}
	first := got.Snapshot.BlobID
	for _, c := range []struct {
		name, method, path, token string
		want                      int
	}{
		{"snapshot 1 again", "PUT", path(workerA, 1), cred, http.StatusConflict},
		{"a number skipped", "PUT", path(workerA, 3), cred, http.StatusConflict},
		{"from another host", "PUT", path(workerB, 2), cred, http.StatusConflict},
		{"download from another host", "GET", path(workerB, 1), cred, http.StatusConflict},
		{"as another credential's worker", "PUT", path("other.a", 2), cred, http.StatusForbidden},
		{"as an unknown worker", "PUT", path(prefix+".nobody", 2), cred, http.StatusNotFound},
		{"number 0", "PUT", path(workerA, 0), cred, http.StatusBadRequest},
		{"with the owner credential", "GET", path(workerA, 1), e.owner, http.StatusUnauthorized},
	} {
		if st, body := e.raw(c.method, c.path, c.token, two); st != c.want {
			t.Errorf("%s %s = %d %s, want %d", c.method, c.name, st, body, c.want)
		}
	}
	if st, body := e.raw("GET", path(workerA, 1), cred, nil); st != http.StatusOK || !bytes.Equal(body, one) {
		t.Errorf("GET snapshot 1 = %d, %d bytes; want 200 and the %d uploaded", st, len(body), len(one))
	}

	// The remote worker's client streams both ways; snapshot 2 replaces 1.
	cp := client.Worker{C: client.New(e.srv.URL, cred)}
	snap, err := cp.PutWorkspaceSnapshot(t.Context(), workerA, ws, 2, bytes.NewReader(two))
	if err != nil || snap.Seq != 2 || snap.Size != int64(len(two)) {
		t.Fatalf("client PutWorkspaceSnapshot(2) = %+v, %v", snap, err)
	}
	if _, err := e.blobs.Get(t.Context(), first); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("snapshot 1's blob after snapshot 2 = %v, want deleted", err)
	}
	rc, err := cp.GetWorkspaceSnapshot(t.Context(), workerA, ws, 2)
	if err != nil {
		t.Fatalf("client GetWorkspaceSnapshot(2) = %v", err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(data, two) {
		t.Errorf("client GetWorkspaceSnapshot(2) = %q, want %q", data, two)
	}
	if _, err := cp.GetWorkspaceSnapshot(t.Context(), workerA, ws, 1); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("client GetWorkspaceSnapshot(1, replaced) = %v, want a conflict", err)
	}
	st, view := e.call("GET", "/v1/workspaces/"+ws, nil)
	if s, _ := view["snapshot"].(map[string]any); st != http.StatusOK || s["seq"] != float64(2) || s["blobId"] != snap.BlobID {
		t.Errorf("GET workspace = %d %v, want snapshot 2", st, view)
	}

	// Deleting the workspace deletes its snapshot.
	if _, err := e.svc.Started(t.Context(), runID, workerA, "process", runs.SystemData{Message: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Finish(t.Context(), runID, runs.Outcome{Status: runs.StatusCompleted}); err != nil {
		t.Fatal(err)
	}
	if st, body := e.call("DELETE", "/v1/workspaces/"+ws, nil); st != http.StatusNoContent {
		t.Fatalf("DELETE workspace = %d %v", st, body)
	}
	if _, err := e.blobs.Get(t.Context(), snap.BlobID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the deleted workspace's snapshot blob = %v, want deleted", err)
	}
	if _, err := cp.PutWorkspaceSnapshot(t.Context(), workerA, ws, 3, bytes.NewReader(two)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("client PutWorkspaceSnapshot(deleted workspace) = %v, want not found", err)
	}
}

// TestOperationMoves: a direct operation on a workspace whose host has no
// live worker, and which has a snapshot, goes to a worker of another
// host, whose host the workspace's becomes.
func TestOperationMoves(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	st, r := e.call("POST", "/v1/tasks/a/runs?project=p&env=dev", `{"payload": 1}`)
	if st != http.StatusCreated {
		t.Fatalf("trigger = %d %v", st, r)
	}
	runID, ws := r["id"].(string), r["workspaceId"].(string)
	caps := workers.Capabilities{CPUs: 4, MemoryBytes: 8 << 30, Host: "hA"}
	if _, err := e.svc.Lease(t.Context(), "wa", caps); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Started(t.Context(), runID, "wa", "process", runs.SystemData{Message: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Finish(t.Context(), runID, runs.Outcome{Status: runs.StatusCompleted}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.RecordSnapshot(t.Context(), ws, "hA", workspaces.Snapshot{Seq: 1, BlobID: "wss_1", Size: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.UpsertWorker(t.Context(), workers.Worker{ID: "wa", Capabilities: caps, LastSeen: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go e.serveOps(ctx) // a worker of host h-ops
	if st, body := e.call("POST", "/v1/workspaces/"+ws+"/exec", `{"argv": ["true"]}`); st != http.StatusOK {
		t.Fatalf("exec on a workspace whose host is gone = %d %v, want 200 from another host's worker", st, body)
	}
	if got, _ := e.st.GetWorkspace(t.Context(), ws); got.Host != "h-ops" {
		t.Errorf("workspace host after the operation = %q, want h-ops", got.Host)
	}
}
