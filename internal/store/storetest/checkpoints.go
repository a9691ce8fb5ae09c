package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/errdefs"
)

var checkpointTests = []storeTest{
	{"CheckpointRoundTrip", testCheckpointRoundTrip},
	{"CheckpointRefused", testCheckpointRefused},
}

func newCheckpoint(runID, id string, at time.Time) checkpoints.Checkpoint {
	return checkpoints.Checkpoint{
		ID: id, RunID: runID, WaitpointID: "wp_1", ExecID: 1<<40 + 7, RequestID: 3,
		Arch: "amd64", Tier: "gvisor", Kernel: "kernel:runsc@sha256:aa", Rootfs: "rootfs:helmr/bookworm-node22@sha256:bb",
		Size: 5 << 20, CreatedAt: at,
	}
}

func testCheckpointRoundTrip(t *testing.T, s Store) {
	ctx := context.Background()
	run := mustCreate(t, s, newRun("p", "dev", "t"))
	first := newCheckpoint(run.ID, "ck_01", base.Add(time.Second))
	second := newCheckpoint(run.ID, "ck_02", base.Add(2*time.Second))
	second.Rootfs = ""
	for _, c := range []checkpoints.Checkpoint{second, first} {
		if err := s.CreateCheckpoint(ctx, c); err != nil {
			t.Fatalf("CreateCheckpoint(%s) = %v", c.ID, err)
		}
	}
	got, err := s.GetCheckpoint(ctx, first.ID)
	if err != nil {
		t.Fatalf("GetCheckpoint() = %v", err)
	}
	if diff := cmp.Diff(first, got); diff != "" {
		t.Errorf("GetCheckpoint() mismatch (-want +got):\n%s", diff)
	}
	list, err := s.ListCheckpoints(ctx, checkpoints.Filter{RunID: run.ID})
	if err != nil || len(list) != 2 || list[0].ID != first.ID || list[1].ID != second.ID || list[1].Rootfs != "" {
		t.Errorf("ListCheckpoints(run) = %+v, %v; want ck_01 then ck_02", list, err)
	}
	other := mustCreate(t, s, newRun("p", "dev", "t"))
	third := newCheckpoint(other.ID, "ck_03", base)
	third.WaitpointID = "wp_2"
	if err := s.CreateCheckpoint(ctx, third); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		f    checkpoints.Filter
		want []string
	}{
		{checkpoints.Filter{WaitpointID: "wp_1"}, []string{"ck_01", "ck_02"}},
		{checkpoints.Filter{WaitpointID: "wp_2"}, []string{"ck_03"}},
		{checkpoints.Filter{RunID: run.ID, WaitpointID: "wp_2"}, nil},
		{checkpoints.Filter{RunID: other.ID}, []string{"ck_03"}},
	} {
		list, err := s.ListCheckpoints(ctx, c.f)
		var got []string
		for _, ck := range list {
			got = append(got, ck.ID)
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ListCheckpoints(%+v) = %v, %v; want %v", c.f, got, err, c.want)
		}
	}
	if _, err := s.ListCheckpoints(ctx, checkpoints.Filter{}); err == nil {
		t.Error("ListCheckpoints(no filter) = nil error")
	}
	restored := base.Add(3 * time.Second)
	if err := s.RestoredCheckpoint(ctx, second.ID, restored); err != nil {
		t.Fatalf("RestoredCheckpoint() = %v", err)
	}
	if got, err := s.GetCheckpoint(ctx, second.ID); err != nil || got.RestoredAt == nil || !got.RestoredAt.Equal(restored) {
		t.Errorf("GetCheckpoint(restored) = %+v, %v; want restored at %s", got, err, restored)
	}
	if got, _ := s.GetCheckpoint(ctx, first.ID); got.RestoredAt != nil {
		t.Errorf("GetCheckpoint(other) restored at %s, want nil", got.RestoredAt)
	}
	wantErr(t, "RestoredCheckpoint(unknown)", s.RestoredCheckpoint(ctx, "ck_none", restored), errdefs.ErrNotFound)
	if err := s.DeleteCheckpoint(ctx, first.ID); err != nil {
		t.Fatalf("DeleteCheckpoint() = %v", err)
	}
	_, err = s.GetCheckpoint(ctx, first.ID)
	wantErr(t, "GetCheckpoint(deleted)", err, errdefs.ErrNotFound)
	if err := s.DeleteCheckpoint(ctx, first.ID); err != nil {
		t.Errorf("DeleteCheckpoint(deleted) = %v, want nil", err)
	}
	if list, err := s.ListCheckpoints(ctx, checkpoints.Filter{RunID: "run_none"}); err != nil || len(list) != 0 {
		t.Errorf("ListCheckpoints(unknown run) = %v, %v; want none", list, err)
	}
}

func testCheckpointRefused(t *testing.T, s Store) {
	ctx := context.Background()
	run := mustCreate(t, s, newRun("p", "dev", "t"))
	before := countRows(t, s)
	good := newCheckpoint(run.ID, "ck_01", base)
	for name, mutate := range map[string]func(*checkpoints.Checkpoint){
		"unknown run": func(c *checkpoints.Checkpoint) { c.RunID = "run_none" },
		"bad id":      func(c *checkpoints.Checkpoint) { c.ID = "x" },
		"no kernel":   func(c *checkpoints.Checkpoint) { c.Kernel = "" },
		"no size":     func(c *checkpoints.Checkpoint) { c.Size = 0 },
	} {
		c := good
		mutate(&c)
		if err := s.CreateCheckpoint(ctx, c); err == nil {
			t.Errorf("CreateCheckpoint(%s) = nil error", name)
		}
	}
	if err := s.CreateCheckpoint(ctx, good); err != nil {
		t.Fatalf("CreateCheckpoint() = %v", err)
	}
	if err := s.CreateCheckpoint(ctx, good); err == nil {
		t.Error("CreateCheckpoint(same id twice) = nil error")
	}
	after := countRows(t, s)
	if after != nil && after["checkpoints"] != before["checkpoints"]+1 {
		t.Errorf("checkpoints rows = %d, want %d", after["checkpoints"], before["checkpoints"]+1)
	}
	_, err := s.GetCheckpoint(ctx, "ck_none")
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetCheckpoint(unknown) = %v, want ErrNotFound", err)
	}
}
