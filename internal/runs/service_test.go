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

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
	"github.com/helmr/helmr/internal/workers"
	"github.com/helmr/helmr/internal/workspaces"
)

func goodTask(id string) deployments.TaskManifest {
	return deployments.TaskManifest{
		ID: id, Module: "bundles/tasks/a.mjs", Export: id, HasRun: true,
		Sandbox: &deployments.SandboxManifest{Name: "s", Image: &deployments.ImageManifest{Name: "i",
			Steps: []deployments.Step{{Kind: "from", Ref: "helmr/bookworm-node22"}}}},
	}
}

func TestFailOrphans(t *testing.T) {
	db := filepath.Join(t.TempDir(), "helmr.db")
	st, err := sqlite.Open(context.Background(), db, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	svc := runs.NewService(st, st, st, runs.NewBroker(), slog.Default())
	if _, err := st.CreateDeployment(ctx, deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{goodTask("a")}},
		Files:    map[string][]byte{"bundles/tasks/a.mjs": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		r, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a", Payload: []byte("1")})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	// One left queued, one leased (STARTING), one RUNNING.
	big := workers.Capabilities{CPUs: 2, MemoryBytes: 1 << 30}
	leased, _ := svc.Lease(ctx, "w", big)
	running, _ := svc.Lease(ctx, "w", big)
	if _, err := svc.Started(ctx, running.ID, "w", "process", runs.SystemData{Message: "x"}); err != nil {
		t.Fatal(err)
	}
	n, err := svc.FailOrphans(ctx, "restarted")
	if err != nil || n != 2 {
		t.Fatalf("FailOrphans() = %d, %v; want 2", n, err)
	}
	// The started run fails; the leased one, whose task never ran, is
	// queued again as the same attempt.
	for _, id := range ids {
		r, _ := svc.Get(ctx, id)
		want := runs.StatusQueued
		if id == running.ID {
			want = runs.StatusFailed
		}
		if r.Status != want || (want == runs.StatusFailed && r.Error.Class != runs.ClassGuestRuntime) || r.Attempt != 1 {
			t.Errorf("run %s = %s attempt %d %+v, want %s attempt 1", id, r.Status, r.Attempt, r.Error, want)
		}
	}
	if again, err := svc.Lease(ctx, "w2", big); err != nil || again.ID != leased.ID || again.WorkerID != "w2" {
		t.Errorf("lease after the requeue = %s on %s, %v; want %s on w2", again.ID, again.WorkerID, err, leased.ID)
	}
	evs, _ := svc.Events(ctx, leased.ID, 0, 100)
	var text string
	for _, ev := range evs {
		text += string(ev.Data) + "\n"
	}
	if !strings.Contains(text, "had not started: queued again, as the same attempt") {
		t.Errorf("the requeued run's events do not say why: %s", text)
	}
}

// TestNeedsAndWaitReasons checks that a run records what its sandbox needs,
// that a worker only leases runs that fit it, and that a run no connected
// worker can take says why in its events while it stays QUEUED.
func TestNeedsAndWaitReasons(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "helmr.db"), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	svc := runs.NewService(st, st, st, runs.NewBroker(), slog.Default())
	big := goodTask("big")
	big.Sandbox.Resources = deployments.Resources{CPU: 64, Memory: "512Gi"}
	small := goodTask("small")
	small.Sandbox.Resources = deployments.Resources{CPU: 1, Memory: "256Mi"}
	if _, err := st.CreateDeployment(ctx, deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{big, small}},
		Files:    map[string][]byte{"bundles/tasks/a.mjs": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	caps := workers.Capabilities{Arch: "amd64", Tiers: []string{"process"}, CPUs: 2, MemoryBytes: 8 << 30, Slots: 2}
	// No worker yet: the run says it waits for one.
	r0, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "small", Payload: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	if !waitReason(t, svc, r0.ID, "no worker is connected") {
		t.Errorf("run without any worker has no event saying so")
	}
	if got, _ := svc.Lease(ctx, "w1", caps); got.ID != r0.ID || got.Needs.CPU != 1 || got.Needs.MemoryBytes != 256<<20 {
		t.Fatalf("Lease() = %+v, want the small run with its needs", got)
	}
	rb, _, _ := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "big", Payload: []byte("1")})
	rs, _, _ := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "small", Payload: []byte("1")})
	if !waitReason(t, svc, rb.ID, "w1: needs 64 vCPUs, the worker offers 2") {
		t.Errorf("the oversized run has no event saying why it waits")
	}
	if waitReason(t, svc, rs.ID, "") {
		t.Errorf("a run that fits got a wait event")
	}
	if got, err := svc.Lease(ctx, "w1", caps); err != nil || got.ID != rs.ID {
		t.Errorf("Lease() = %v, %v; want the small run, skipping the big one queued before it", got.ID, err)
	}
	if got, _ := svc.Get(ctx, rb.ID); got.Status != runs.StatusQueued {
		t.Errorf("big run = %s, want QUEUED", got.Status)
	}
}

func waitReason(t *testing.T, svc *runs.Service, id, substr string) bool {
	t.Helper()
	evs, err := svc.Events(context.Background(), id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == runs.EventSystem && strings.Contains(string(ev.Data), "no_fitting_worker") && strings.Contains(string(ev.Data), substr) {
			return true
		}
	}
	return false
}

// TestFailLostRuns: a running run whose worker stopped reporting fails
// as guest_runtime; a run whose worker is alive, and a queued run, stay.
// (A lost worker's runs that had not started go back to the queue: see
// TestFailOrphans.)
func TestFailLostRuns(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "helmr.db"), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	svc := runs.NewService(st, st, st, runs.NewBroker(), slog.Default())
	svc.WorkerTTL = time.Minute
	if _, err := st.CreateDeployment(ctx, deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{goodTask("a")}},
		Files:    map[string][]byte{"bundles/tasks/a.mjs": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	caps := workers.Capabilities{CPUs: 2, MemoryBytes: 1 << 30}
	trigger := func() string {
		r, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a", Payload: []byte("1")})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	lostRun, liveRun, queued := trigger(), trigger(), trigger()
	if r, _ := svc.Lease(ctx, "lost", caps); r.ID != lostRun {
		t.Fatalf("lease = %s, want %s", r.ID, lostRun)
	}
	if _, err := svc.Started(ctx, lostRun, "lost", "process", runs.SystemData{Message: "started"}); err != nil {
		t.Fatal(err)
	}
	if r, _ := svc.Lease(ctx, "live", caps); r.ID != liveRun {
		t.Fatalf("lease = %s, want %s", r.ID, liveRun)
	}
	// The lost worker was last heard of two minutes ago.
	if err := st.UpsertWorker(ctx, workers.Worker{ID: "lost", Capabilities: caps, LastSeen: time.Now().Add(-2 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := svc.Heartbeat(ctx, "live", caps); err != nil {
		t.Fatal(err)
	}
	n, err := svc.FailLostRuns(ctx)
	if err != nil || n != 1 {
		t.Fatalf("FailLostRuns() = %d, %v; want 1", n, err)
	}
	for id, want := range map[string]runs.Status{lostRun: runs.StatusFailed, liveRun: runs.StatusStarting, queued: runs.StatusQueued} {
		r, _ := svc.Get(ctx, id)
		if r.Status != want {
			t.Errorf("run %s = %s, want %s", id, r.Status, want)
		}
		if want == runs.StatusFailed && (r.Error == nil || r.Error.Class != runs.ClassGuestRuntime || !strings.Contains(r.Error.Message, "worker lost stopped reporting")) {
			t.Errorf("lost run error = %+v", r.Error)
		}
	}
	if err := svc.Heartbeat(ctx, "", caps); err == nil {
		t.Error("Heartbeat without a worker id accepted")
	}
}

// TestBuiltImageNeeds checks deploy-time builds through the service: the
// build run is leased with the deployment, its completion makes the
// deployment current, and a run of a task whose image was built on a
// built-in base needs that base's digest: a worker without it is passed
// over (the run says why), a worker with it leases the run, which names
// the image digest to reproduce.
func TestBuiltImageNeeds(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "helmr.db"), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	svc := runs.NewService(st, st, st, runs.NewBroker(), slog.Default())
	d, err := st.CreateDeployment(ctx, deployments.Deployment{Project: "p", Env: "dev", BuildRunID: "run_build1",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{goodTask("a")}},
		Files:    map[string][]byte{"bundles/tasks/a.mjs": []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.QueueBuild(ctx, d.BuildRunID, d, runs.BuildPayload{NoCache: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a"}); err == nil {
		t.Fatal("Trigger while the only deployment is BUILDING succeeded, want not found")
	}
	had := workers.Capabilities{CPUs: 2, MemoryBytes: 1 << 30, Digests: []string{"rootfs:helmr/bookworm-node22@sha256:aaa"}}
	other := workers.Capabilities{CPUs: 2, MemoryBytes: 1 << 30, Digests: []string{"rootfs:helmr/bookworm-node22@sha256:bbb"}}
	b, err := svc.Lease(ctx, "w-other", other)
	if err != nil || b.ID != d.BuildRunID || b.Kind != runs.KindBuild || string(b.Payload) != `{"noCache":true}` {
		t.Fatalf("Lease = %+v, %v; want the build run with its payload", b, err)
	}
	if _, err := svc.Started(ctx, b.ID, "w-other", "gvisor", runs.SystemData{Message: "building"}); err != nil {
		t.Fatal(err)
	}
	img := deployments.ImageBuild{Name: "i", Digest: "sha256:img", Base: "helmr/bookworm-node22", BaseDigest: "sha256:aaa"}
	out, _ := json.Marshal(deployments.BuildOutput{Images: map[string]deployments.ImageBuild{"a": img}})
	if _, err := svc.Finish(ctx, b.ID, runs.Outcome{Status: runs.StatusCompleted, Output: out}); err != nil {
		t.Fatal(err)
	}
	r, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Needs.Image != "sha256:img" || r.Needs.BaseDigest != "sha256:aaa" || len(r.Needs.Digests) != 1 || r.Needs.Digests[0] != "rootfs:helmr/bookworm-node22@sha256:aaa" {
		t.Errorf("run needs = %+v, want the built image and its base", r.Needs)
	}
	evs, _ := svc.Events(ctx, r.ID, 0, 0)
	if last := string(evs[len(evs)-1].Data); !strings.Contains(last, "needs base image helmr/bookworm-node22@sha256:aaa") {
		t.Errorf("last event = %s, want why w-other cannot take the run", last)
	}
	if got, err := svc.Lease(ctx, "w-other", other); err == nil {
		t.Errorf("Lease(worker with another base) = %s, want none", got.ID)
	}
	if got, err := svc.Lease(ctx, "w-had", had); err != nil || got.ID != r.ID {
		t.Errorf("Lease(worker with the base) = %s, %v; want %s", got.ID, err, r.ID)
	}
}

// TestWorkspaceMoves checks that runs of a workspace whose host has no
// live worker go to any worker once the workspace has a snapshot: a run
// queued before is freed by MoveStrandedRuns, a run triggered after is
// placed on no host at once, each saying so in its events; without a
// snapshot the run keeps waiting for the host.
func TestWorkspaceMoves(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "helmr.db"), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	svc := runs.NewService(st, st, st, runs.NewBroker(), slog.Default())
	svc.Workspaces = st
	if _, err := st.CreateDeployment(ctx, deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{goodTask("a")}},
		Files:    map[string][]byte{"bundles/tasks/a.mjs": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	hostA := workers.Capabilities{CPUs: 2, MemoryBytes: 1 << 30, Host: "hA"}
	hostB := hostA
	hostB.Host = "hB"
	trigger := func(ws string) runs.Run {
		t.Helper()
		r, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a", Payload: []byte("1"), WorkspaceID: ws})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	finish := func(id, worker string) {
		t.Helper()
		if _, err := svc.Started(ctx, id, worker, "process", runs.SystemData{Message: "x"}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Finish(ctx, id, runs.Outcome{Status: runs.StatusCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(id string, caps workers.Capabilities) {
		t.Helper()
		if err := st.UpsertWorker(ctx, workers.Worker{ID: id, Capabilities: caps, LastSeen: time.Now().Add(-2 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	moveNotes := func(id string) int {
		evs, _ := svc.Events(ctx, id, 0, 0)
		n := 0
		for _, e := range evs {
			if e.Type == runs.EventSystem && strings.Contains(string(e.Data), "moves: no worker of its host") {
				n++
			}
		}
		return n
	}

	first := trigger("")
	if r, err := svc.Lease(ctx, "a", hostA); err != nil || r.ID != first.ID {
		t.Fatalf("Lease(a) = %s, %v; want %s", r.ID, err, first.ID)
	}
	finish(first.ID, "a")
	ws := first.WorkspaceID
	if h, err := svc.WorkerHost(ctx, "a"); err != nil || h != "hA" {
		t.Errorf("WorkerHost(a) = %q, %v; want hA", h, err)
	}
	second := trigger(ws)
	if second.Needs.Host != "hA" {
		t.Fatalf("a run of a workspace on a live host needs host %q, want hA", second.Needs.Host)
	}
	gone("a", hostA)
	if h, err := svc.WorkerHost(ctx, "a"); err != nil || h != "hA" {
		t.Errorf("WorkerHost(a gone) = %q, %v; want hA still", h, err)
	}
	if _, err := svc.WorkerHost(ctx, "nobody"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("WorkerHost(nobody) = %v, want errdefs.ErrNotFound", err)
	}
	if n, err := svc.MoveStrandedRuns(ctx); err != nil || n != 0 {
		t.Errorf("MoveStrandedRuns() without a snapshot = %d, %v; want 0: the files are only on hA", n, err)
	}
	if _, err := st.RecordSnapshot(ctx, ws, "hA", workspaces.Snapshot{Seq: 1, BlobID: "wss_1", Size: 10}); err != nil {
		t.Fatal(err)
	}
	if n, err := svc.MoveStrandedRuns(ctx); err != nil || n != 1 {
		t.Fatalf("MoveStrandedRuns() = %d, %v; want 1", n, err)
	}
	if r, _ := svc.Get(ctx, second.ID); r.Needs.Host != "" || moveNotes(second.ID) != 1 {
		t.Errorf("moved run needs host %q with %d notes, want none and one note", r.Needs.Host, moveNotes(second.ID))
	}
	if n, _ := svc.MoveStrandedRuns(ctx); n != 0 {
		t.Errorf("MoveStrandedRuns() again = %d, want 0", n)
	}
	if r, err := svc.Lease(ctx, "b", hostB); err != nil || r.ID != second.ID {
		t.Fatalf("Lease(b) = %s, %v; want the moved run %s", r.ID, err, second.ID)
	}
	if w, _ := st.GetWorkspace(ctx, ws); w.Host != "hB" {
		t.Errorf("workspace host after the move = %q, want hB", w.Host)
	}
	finish(second.ID, "b")
	// Host hB goes too: a new run is placed on no host right away.
	gone("b", hostB)
	third := trigger(ws)
	if third.Needs.Host != "" || moveNotes(third.ID) != 1 {
		t.Errorf("a run triggered after its host went needs %q with %d notes, want no host and one note", third.Needs.Host, moveNotes(third.ID))
	}
}

// TestTriggerStoreOutage: a task lookup that fails for any reason other
// than "not found" (the database is closed) is an error of no kind (an
// internal failure), never errdefs.ErrNotFound.
func TestTriggerStoreOutage(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "helmr.db"), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	svc := runs.NewService(st, st, st, runs.NewBroker(), slog.Default())
	if _, err := st.CreateDeployment(ctx, deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{goodTask("a")}},
		Files:    map[string][]byte{"bundles/tasks/a.mjs": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	_, _, err = svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "nope", Payload: []byte("1")})
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Trigger(unknown task) = %v, want ErrNotFound", err)
	}
	st.Close()
	_, _, err = svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a", Payload: []byte("1")})
	if err == nil || errdefs.Kind(err) != nil {
		t.Errorf("Trigger with the store closed = %v (kind %v), want an error of no kind", err, errdefs.Kind(err))
	}
}

// TestPausedWorkspaceRefusesRuns: a run may not take a workspace whose
// sandbox is paused; once resumed, it may.
func TestPausedWorkspaceRefusesRuns(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "helmr.db"), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	svc := runs.NewService(st, st, st, runs.NewBroker(), slog.Default())
	svc.Workspaces = st
	if _, err := st.CreateDeployment(ctx, deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{goodTask("a")}},
		Files:    map[string][]byte{"bundles/tasks/a.mjs": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	ws, err := st.CreateWorkspace(ctx, workspaces.Workspace{Project: "p", Env: "dev", TaskID: "a", CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PauseWorkspace(ctx, ws.ID, "", workspaces.Pause{CheckpointID: "wsck_1", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	req := runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a", Payload: []byte("1"), WorkspaceID: ws.ID}
	if _, _, err := svc.Trigger(ctx, req); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("Trigger(paused workspace) = %v, want a conflict saying it is paused", err)
	}
	if err := st.ResumeWorkspace(ctx, ws.ID, "wsck_1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Trigger(ctx, req); err != nil {
		t.Errorf("Trigger(resumed workspace) = %v", err)
	}
}
