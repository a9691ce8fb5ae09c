package runs_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
	"github.com/helmr/helmr/internal/workers"
)

// TestLostRunRestoresCheckpoint: a run restored from a checkpoint whose
// worker is then lost is retried from that checkpoint, kept until then,
// and its events say what was lost and what was kept; a run that fails
// by its own doing is retried afresh, its checkpoints dropped; a run
// waiting in its sandbox (perhaps being parked) when its worker is lost
// says a checkpoint being taken is lost.
func TestLostRunRestoresCheckpoint(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "helmr.db"), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	task := goodTask("a")
	task.Retry = &runs.RetryPolicy{MaxAttempts: 3, MinTimeoutMs: 1}
	if _, err := st.CreateDeployment(ctx, deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{task}},
		Files:    map[string][]byte{"bundles/tasks/a.mjs": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	svc := runs.NewService(st, st, st, runs.NewBroker(), slog.Default())
	svc.WorkerTTL = time.Minute
	svc.Checkpoints = st
	var dropped []string
	svc.DropCheckpoints = func(ctx context.Context, runID string) {
		dropped = append(dropped, runID)
		cks, _ := st.ListCheckpoints(ctx, checkpoints.Filter{RunID: runID})
		for _, ck := range cks {
			_ = st.DeleteCheckpoint(ctx, ck.ID)
		}
	}
	caps := workers.Capabilities{CPUs: 2, MemoryBytes: 1 << 30}
	lease := func(worker, want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			r, err := svc.Lease(ctx, worker, caps)
			if err == nil {
				if r.ID != want {
					t.Fatalf("%s leased %s, want %s", worker, r.ID, want)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("nothing to lease for %s: %v", worker, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	lose := func(worker string) {
		t.Helper()
		if err := st.UpsertWorker(ctx, workers.Worker{ID: worker, Capabilities: caps, LastSeen: time.Now().Add(-2 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if n, err := svc.FailLostRuns(ctx); err != nil || n != 1 {
			t.Fatalf("FailLostRuns() = %d, %v; want 1", n, err)
		}
	}
	notes := func(id string) string {
		evs, _ := svc.Events(ctx, id, 0, 100)
		var out []string
		for _, ev := range evs {
			if ev.Type == runs.EventSystem {
				var d runs.SystemData
				_ = json.Unmarshal(ev.Data, &d)
				out = append(out, d.Message)
			}
		}
		return strings.Join(out, "\n")
	}

	// Restored from ck_r1, then lost: attempt 2 restores ck_r1 again.
	r, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	lease("w1", r.ID)
	if _, err := svc.Started(ctx, r.ID, "w1", "gvisor", runs.SystemData{Message: "started"}); err != nil {
		t.Fatal(err)
	}
	ck := checkpoints.Checkpoint{ID: "ck_r1", RunID: r.ID, WaitpointID: "wp_1", ExecID: 1, RequestID: 1,
		Arch: "amd64", Tier: "gvisor", Kernel: "kernel:runsc@sha256:aa", Size: 10, CreatedAt: time.Now()}
	if err := st.CreateCheckpoint(ctx, ck); err != nil {
		t.Fatal(err)
	}
	if err := st.RestoredCheckpoint(ctx, ck.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	lose("w1")
	got, _ := svc.Get(ctx, r.ID)
	if got.Status != runs.StatusQueued || got.Attempt != 2 || len(got.Attempts) != 1 {
		t.Fatalf("after its worker was lost: %s attempt %d %+v, want QUEUED for attempt 2", got.Status, got.Attempt, got.Attempts)
	}
	msg := got.Attempts[0].Error.Message
	for _, want := range []string{"worker w1 stopped reporting", "while the run was RUNNING", "lost: the sandbox's memory", "kept: checkpoint ck_r1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("lost attempt's message lacks %q: %s", want, msg)
		}
	}
	if n := notes(r.ID); !strings.Contains(n, "attempt 2 starts in") || !strings.Contains(n, "restoring checkpoint ck_r1") {
		t.Errorf("retry note does not say it restores ck_r1: %s", n)
	}
	if cks, _ := st.ListCheckpoints(ctx, checkpoints.Filter{RunID: r.ID}); len(cks) != 1 || len(dropped) != 0 {
		t.Errorf("checkpoints after the loss = %+v (dropped %v), want ck_r1 kept", cks, dropped)
	}

	// Attempt 2 fails by the task's own doing: attempt 3 starts afresh,
	// with the checkpoint dropped.
	lease("w2", r.ID)
	if _, err := svc.Finish(ctx, r.ID, runs.Outcome{Status: runs.StatusFailed, Error: &runs.Error{Class: runs.ClassTaskProcess, Message: "boom"}}); err != nil {
		t.Fatal(err)
	}
	if n := notes(r.ID); !strings.Contains(n, "attempt 3 starts in") || !strings.Contains(n, "ms, from a fresh sandbox") {
		t.Errorf("second retry note: %s", n)
	}
	if cks, _ := st.ListCheckpoints(ctx, checkpoints.Filter{RunID: r.ID}); len(cks) != 0 || len(dropped) != 1 {
		t.Errorf("checkpoints after a task failure = %+v (dropped %v), want none", cks, dropped)
	}

	if _, err := svc.Cancel(ctx, r.ID); err != nil {
		t.Fatal(err)
	}

	// Waiting in its sandbox, no checkpoint recorded: the loss names a
	// park in progress as lost, and the retry is fresh.
	w, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	lease("w3", w.ID)
	if _, err := svc.Started(ctx, w.ID, "w3", "gvisor", runs.SystemData{Message: "started"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WaitOn(ctx, w.ID, runs.SystemData{Message: "waiting"}); err != nil {
		t.Fatal(err)
	}
	lose("w3")
	got, _ = svc.Get(ctx, w.ID)
	if got.Status != runs.StatusQueued || len(got.Attempts) != 1 ||
		!strings.Contains(got.Attempts[0].Error.Message, "a checkpoint the worker may have been taking to park the run") ||
		strings.Contains(got.Attempts[0].Error.Message, "kept: checkpoint") {
		t.Errorf("waiting run after its worker was lost: %s %+v", got.Status, got.Attempts)
	}
	if n := notes(w.ID); !strings.Contains(n, "from a fresh sandbox") {
		t.Errorf("retry note of the waiting run: %s", n)
	}
}

// TestStaleOutcomeRefused: a worker given up as lost whose outcome
// arrives after the run was retried on another worker cannot end the
// new attempt; the outcome of the attempt that holds the run can.
func TestStaleOutcomeRefused(t *testing.T) {
	ctx := context.Background()
	task := goodTask("a")
	task.Retry = &runs.RetryPolicy{MaxAttempts: 3, MinTimeoutMs: 1}
	svc := flowService(t, task)
	svc.WorkerTTL = time.Minute
	caps := workers.Capabilities{CPUs: 2, MemoryBytes: 1 << 30}
	r, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	leaseAs := func(worker string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err := svc.Lease(ctx, worker, caps)
			if err == nil && got.ID == r.ID {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s leased nothing: %v", worker, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	leaseAs("w1")
	// w1 fails (its task threw): attempt 2 goes to w2.
	if _, err := svc.Finish(ctx, r.ID, runs.Outcome{Status: runs.StatusFailed, Error: &runs.Error{Class: runs.ClassTaskProcess, Message: "boom"},
		WorkerID: "w1", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	leaseAs("w2")
	// w1's report again (a retry of a request whose answer it lost).
	_, err = svc.Finish(ctx, r.ID, runs.Outcome{Status: runs.StatusFailed, Error: &runs.Error{Class: runs.ClassTaskProcess, Message: "boom"},
		WorkerID: "w1", Attempt: 1})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("stale outcome = %v, want a conflict", err)
	}
	got, _ := svc.Get(ctx, r.ID)
	if got.Status != runs.StatusStarting || got.Attempt != 2 || got.WorkerID != "w2" || len(got.Attempts) != 1 {
		t.Fatalf("after the stale outcome: %s attempt %d on %s %+v, want attempt 2 starting on w2", got.Status, got.Attempt, got.WorkerID, got.Attempts)
	}
	// Even a success of the old attempt is refused; w2's is taken.
	if _, err := svc.Finish(ctx, r.ID, runs.Outcome{Status: runs.StatusCompleted, Output: []byte(`1`), WorkerID: "w2", Attempt: 1}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("outcome naming attempt 1 on w2 = %v, want a conflict", err)
	}
	if got, err := svc.Finish(ctx, r.ID, runs.Outcome{Status: runs.StatusCompleted, Output: []byte(`2`), WorkerID: "w2", Attempt: 2}); err != nil ||
		got.Status != runs.StatusCompleted || string(got.Output) != "2" {
		t.Errorf("w2's outcome = %s %s, %v; want COMPLETED 2", got.Status, got.Output, err)
	}
}

// TestReturnLease: a lease handed out as its worker went away goes back
// to the queue as the same attempt, and a stale return (the run started
// meanwhile on that worker, or leased elsewhere) is refused.
func TestReturnLease(t *testing.T) {
	ctx := context.Background()
	svc := flowService(t, goodTask("a"))
	caps := workers.Capabilities{CPUs: 2, MemoryBytes: 1 << 30}
	r, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	leased, err := svc.Lease(ctx, "gone", caps)
	if err != nil || leased.ID != r.ID {
		t.Fatalf("Lease = %s, %v", leased.ID, err)
	}
	if err := svc.ReturnLease(ctx, leased); err != nil {
		t.Fatalf("ReturnLease = %v", err)
	}
	got, _ := svc.Get(ctx, r.ID)
	if got.Status != runs.StatusQueued || got.Attempt != 1 || len(got.Attempts) != 0 {
		t.Errorf("after ReturnLease: %s attempt %d %+v, want QUEUED, attempt 1", got.Status, got.Attempt, got.Attempts)
	}
	again, err := svc.Lease(ctx, "w2", caps)
	if err != nil || again.ID != r.ID {
		t.Fatalf("Lease again = %s, %v", again.ID, err)
	}
	if err := svc.ReturnLease(ctx, leased); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("stale ReturnLease = %v, want a conflict (w2 holds it)", err)
	}
}
