package storetest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/helmr/helmr/internal/runs"
)

var statsTests = []storeTest{
	{"RunStats", testRunStats},
}

// testRunStats: the counts of unfinished runs by status, the queue's
// depth and its oldest due run (a delayed run is queued but not due; a
// requeued run is due from its requeue), and parked runs.
func testRunStats(t *testing.T, s Store) {
	ctx := t.Context()
	got, err := s.RunStats(ctx, at(100))
	if err != nil {
		t.Fatalf("RunStats(empty store) = %v", err)
	}
	if got.Due != 0 || !got.OldestDue.IsZero() || got.Parked != 0 || got.Live[runs.StatusQueued] != 0 {
		t.Errorf("RunStats(empty store) = %+v, want nothing", got)
	}
	// leased creates a run and leases it (STARTING), then moves it on
	// through the given statuses.
	leased := func(sec int, through ...runs.Status) runs.Run {
		t.Helper()
		r := newRun("p", "dev", "a")
		r.CreatedAt = at(sec)
		mustCreate(t, s, r)
		r, err := s.LeaseRun(ctx, "w1", anything, at(10), 0)
		if err != nil {
			t.Fatalf("LeaseRun() = %v", err)
		}
		from := runs.StatusStarting
		for _, to := range through {
			var tr runs.Transition
			tr.From, tr.To, tr.Time = []runs.Status{from}, to, at(20)
			if to == runs.StatusQueued {
				due := at(50)
				tr.Due = &due
			}
			if to.Terminal() {
				tr.FinishedAt = &tr.Time
			}
			if r, _, err = s.Transition(ctx, r.ID, tr); err != nil {
				t.Fatalf("Transition(%s → %s) = %v", from, to, err)
			}
			from = to
		}
		return r
	}
	leased(0, runs.StatusRunning)
	parked := leased(1, runs.StatusRunning, runs.StatusWaiting)
	if err := s.ReleaseSlot(ctx, parked.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateCheckpoint(ctx, newCheckpoint(parked.ID, "ck_1", at(30))); err != nil {
		t.Fatal(err)
	}
	// Restored from a checkpoint it keeps, waiting again in its sandbox.
	restored := leased(2, runs.StatusRunning, runs.StatusWaiting)
	if err := s.CreateCheckpoint(ctx, newCheckpoint(restored.ID, "ck_2", at(20))); err != nil {
		t.Fatal(err)
	}
	if err := s.RestoredCheckpoint(ctx, "ck_2", at(25)); err != nil {
		t.Fatal(err)
	}
	leased(3) // STARTING
	leased(4, runs.StatusRunning, runs.StatusWaiting, runs.StatusQueued)
	leased(5, runs.StatusRunning, runs.StatusCompleted)
	queued := newRun("p", "dev", "a")
	queued.CreatedAt = at(40)
	mustCreate(t, s, queued)
	delayed := newRun("p", "dev", "a")
	delayed.CreatedAt, delayed.AvailableAt = at(6), ptr(at(500))
	mustCreate(t, s, delayed)

	got, err = s.RunStats(ctx, at(100))
	if err != nil {
		t.Fatalf("RunStats() = %v", err)
	}
	want := runs.Stats{
		Live: map[runs.Status]int{runs.StatusQueued: 3, runs.StatusStarting: 1, runs.StatusRunning: 1, runs.StatusWaiting: 2},
		Due:  2, OldestDue: at(40), Parked: 1,
	}
	if d := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.EquateApproxTime(0)); d != "" {
		t.Errorf("RunStats() mismatch (-want +got):\n%s", d)
	}
	// Later, the delayed run is due too, but since 500, not since its
	// creation at 6: the oldest stays the run created at 40.
	got, err = s.RunStats(ctx, at(600))
	if err != nil || got.Due != 3 || !got.OldestDue.Equal(at(40)) {
		t.Errorf("RunStats(later) = %+v, %v; want 3 due, the oldest due since %v", got, err, at(40))
	}
}
