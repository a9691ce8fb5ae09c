package runs_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
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
	svc := runs.NewService(st, st, runs.NewBroker(), slog.Default())
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
	leased, _ := svc.Lease(ctx, "w")
	running, _ := svc.Lease(ctx, "w")
	if _, err := svc.Started(ctx, running.ID, "w", "process", runs.SystemData{Message: "x"}); err != nil {
		t.Fatal(err)
	}
	n, err := svc.FailOrphans(ctx, "restarted")
	if err != nil || n != 2 {
		t.Fatalf("FailOrphans() = %d, %v; want 2", n, err)
	}
	for _, id := range ids {
		r, _ := svc.Get(ctx, id)
		want := runs.StatusFailed
		if id != leased.ID && id != running.ID {
			want = runs.StatusQueued
		}
		if r.Status != want || (want == runs.StatusFailed && r.Error.Class != runs.ClassGuestRuntime) {
			t.Errorf("run %s = %s %+v, want %s", id, r.Status, r.Error, want)
		}
	}
}
