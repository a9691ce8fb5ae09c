package storetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

var flowTests = []storeTest{
	{"LeaseQueueLimit", testLeaseQueueLimit},
	{"LeaseQueueLimitConcurrent", testLeaseQueueLimitConcurrent},
	{"LeasePriorityAndDelay", testLeasePriorityAndDelay},
	{"LeasePausedQueue", testLeasePausedQueue},
	{"LeaseEnvLimit", testLeaseEnvLimit},
	{"RetryTransition", testRetryTransition},
	{"ExpireRuns", testExpireRuns},
	{"RunTagsAndIdempotencyTTL", testRunTags},
}

func queued(project, task, queue, key string, offset int) runs.Run {
	r := newRun(project, "dev", task)
	r.Queue, r.ConcurrencyKey, r.CreatedAt = queue, key, at(offset)
	return r
}

// leaseAll leases until nothing fits and returns the leased ids in order.
func leaseAll(t *testing.T, s Store, envLimit int) []string {
	t.Helper()
	var ids []string
	for {
		r, err := s.LeaseRun(t.Context(), "w1", anything, at(1000), envLimit)
		if errors.Is(err, errdefs.ErrNotFound) {
			return ids
		}
		if err != nil {
			t.Fatalf("LeaseRun: %v", err)
		}
		ids = append(ids, r.ID)
	}
}

func testLeaseQueueLimit(t *testing.T, s Store) {
	ctx := t.Context()
	if err := s.DeclareQueue(ctx, runs.Queue{Project: "p", Env: "dev", Name: "q", ConcurrencyLimit: 2}); err != nil {
		t.Fatal(err)
	}
	var inQ, tenantA, tenantB, other []string
	for i := range 4 {
		inQ = append(inQ, mustCreate(t, s, queued("p", "t", "q", "", i)).ID)
	}
	for i := range 3 {
		tenantA = append(tenantA, mustCreate(t, s, queued("p", "t", "q", "a", 10+i)).ID)
		tenantB = append(tenantB, mustCreate(t, s, queued("p", "t", "q", "b", 20+i)).ID)
	}
	other = append(other, mustCreate(t, s, queued("p", "u", "task/u", "", 30)).ID)
	got := leaseAll(t, s, 0)
	// Two of the keyless queue, two per tenant (keys split the queue),
	// and the unlimited queue's run, oldest first.
	want := append(append(append(append([]string{}, inQ[:2]...), tenantA[:2]...), tenantB[:2]...), other...)
	if !slices.Equal(got, want) {
		t.Fatalf("leased %v, want %v", got, want)
	}
	// A run that ends frees its slot; a parked one too.
	if _, _, err := s.Transition(ctx, inQ[0], runs.Transition{From: []runs.Status{runs.StatusStarting}, To: runs.StatusCompleted, Time: at(1001)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Transition(ctx, tenantA[0], runs.Transition{From: []runs.Status{runs.StatusStarting}, To: runs.StatusWaiting, Time: at(1001)}); err != nil {
		t.Fatal(err)
	}
	if got := leaseAll(t, s, 0); !slices.Equal(got, inQ[2:3]) {
		t.Errorf("after one ended: leased %v, want %v (a waiting run keeps its slot)", got, inQ[2:3])
	}
	if err := s.ReleaseSlot(ctx, tenantA[0]); err != nil {
		t.Fatal(err)
	}
	if got := leaseAll(t, s, 0); !slices.Equal(got, tenantA[2:3]) {
		t.Errorf("after a parked run let go: leased %v, want %v", got, tenantA[2:3])
	}
	if err := s.ReleaseSlot(ctx, inQ[1]); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("ReleaseSlot of a started run = %v, want a conflict", err)
	}
	q, err := s.GetQueue(ctx, "p", "dev", "q")
	if err != nil || q.ConcurrencyLimit != 2 || q.Queued != 2 || q.Running != 6 {
		t.Errorf("GetQueue = %+v, %v; want limit 2, 2 queued, 6 holding slots", q, err)
	}
	qs, err := s.ListQueues(ctx, "p", "dev")
	if err != nil || len(qs) != 2 || qs[0].Name != "q" || qs[1].Name != "task/u" {
		t.Errorf("ListQueues = %+v, %v", qs, err)
	}
	if _, err := s.GetQueue(ctx, "p", "dev", "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetQueue(unknown) = %v, want not found", err)
	}
}

func testLeaseQueueLimitConcurrent(t *testing.T, s Store) {
	ctx := t.Context()
	if err := s.DeclareQueue(ctx, runs.Queue{Project: "p", Env: "dev", Name: "q", ConcurrencyLimit: 3}); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		mustCreate(t, s, queued("p", "t", "q", "", i))
	}
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				if _, err := s.LeaseRun(context.Background(), "w", anything, time.Now(), 0); err == nil {
					mu.Lock()
					n++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if n != 3 {
		t.Errorf("8 concurrent leasers took %d runs of a queue limited to 3", n)
	}
}

func testLeasePriorityAndDelay(t *testing.T, s Store) {
	low := mustCreate(t, s, queued("p", "t", "task/t", "", 0))
	hi := queued("p", "t", "task/t", "", 1)
	hi.Priority = 5
	high := mustCreate(t, s, hi)
	later := queued("p", "t", "task/t", "", 2)
	later.Priority = 10
	due := at(2000)
	later.AvailableAt = &due
	delayed := mustCreate(t, s, later)
	if got := leaseAll(t, s, 0); !slices.Equal(got, []string{high.ID, low.ID}) {
		t.Errorf("leased %v, want the higher priority first and the delayed run not yet", got)
	}
	r, err := s.LeaseRun(t.Context(), "w1", anything, at(2001), 0)
	if err != nil || r.ID != delayed.ID {
		t.Errorf("after its time: LeaseRun = %v %v, want the delayed run", r.ID, err)
	}
}

func testLeasePausedQueue(t *testing.T, s Store) {
	ctx := t.Context()
	r := mustCreate(t, s, queued("p", "t", "task/t", "", 0))
	q, err := s.PauseQueue(ctx, "p", "dev", "task/t", true)
	if err != nil || !q.Paused || q.Queued != 1 {
		t.Fatalf("PauseQueue = %+v, %v", q, err)
	}
	if got := leaseAll(t, s, 0); len(got) != 0 {
		t.Errorf("a paused queue started %v", got)
	}
	if _, err := s.PauseQueue(ctx, "p", "dev", "task/t", false); err != nil {
		t.Fatal(err)
	}
	if got := leaseAll(t, s, 0); !slices.Equal(got, []string{r.ID}) {
		t.Errorf("resumed: leased %v, want %s", got, r.ID)
	}
}

func testLeaseEnvLimit(t *testing.T, s Store) {
	for i := range 3 {
		mustCreate(t, s, queued("p", "t", "task/t", "", i))
		mustCreate(t, s, queued("o", "t", "task/t", "", 10+i))
	}
	if got := leaseAll(t, s, 2); len(got) != 4 {
		t.Errorf("an environment limit of 2 with two environments leased %d runs, want 4", len(got))
	}
}

func testRetryTransition(t *testing.T, s Store) {
	ctx := t.Context()
	in := queued("p", "t", "task/t", "", 0)
	in.Retry = &runs.RetryPolicy{MaxAttempts: 3, Factor: 2, MinTimeoutMs: 100}
	r := mustCreate(t, s, in)
	leased, err := s.LeaseRun(ctx, "w1", anything, at(10), 0)
	if err != nil || leased.ID != r.ID || leased.Attempt != 1 || leased.Retry == nil || leased.Retry.MaxAttempts != 3 {
		t.Fatalf("LeaseRun = %+v, %v", leased, err)
	}
	next := at(20)
	failure := &runs.Error{Class: runs.ClassTaskProcess, Message: "boom"}
	got, _, err := s.Transition(ctx, r.ID, runs.Transition{From: []runs.Status{runs.StatusStarting}, To: runs.StatusQueued, Time: at(11),
		Retry: &runs.Retry{At: next, Failed: runs.Attempt{Attempt: 1, Status: runs.StatusFailed, Error: failure, WorkerID: "w1", FinishedAt: at(11)}}})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.GetRun(ctx, r.ID)
	if err != nil || diff(got, stored) != "" {
		t.Fatalf("GetRun after retry: %v %s", err, diff(got, stored))
	}
	if stored.Status != runs.StatusQueued || stored.Attempt != 2 || len(stored.Attempts) != 1 || stored.Attempts[0].Error.Message != "boom" ||
		stored.WorkerID != "" || stored.Error != nil || stored.AvailableAt == nil || !stored.AvailableAt.Equal(next) {
		t.Errorf("after a retry: %+v", stored)
	}
	if _, err := s.LeaseRun(ctx, "w1", anything, at(15), 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("leased before the backoff ran out: %v", err)
	}
	if again, err := s.LeaseRun(ctx, "w2", anything, at(21), 0); err != nil || again.ID != r.ID || again.Attempt != 2 {
		t.Errorf("after the backoff: %+v, %v", again, err)
	}
}

func testExpireRuns(t *testing.T, s Store) {
	ctx := t.Context()
	exp := at(50)
	in := queued("p", "t", "task/t", "", 0)
	in.ExpiresAt = &exp
	r := mustCreate(t, s, in)
	keep := mustCreate(t, s, queued("p", "t", "task/t", "", 1))
	if got, err := s.ExpireRuns(ctx, at(49)); err != nil || len(got) != 0 {
		t.Fatalf("ExpireRuns before = %v, %v", got, err)
	}
	got, err := s.ExpireRuns(ctx, at(51))
	if err != nil || len(got) != 1 || got[0].ID != r.ID || got[0].Status != runs.StatusExpired {
		t.Fatalf("ExpireRuns = %+v, %v", got, err)
	}
	if k, _ := s.GetRun(ctx, keep.ID); k.Status != runs.StatusQueued {
		t.Errorf("a run without a ttl is %s", k.Status)
	}
}

func testRunTags(t *testing.T, s Store) {
	ctx := t.Context()
	in := queued("p", "t", "task/t", "", 0)
	in.Tags = []string{"tenant:a", "nightly", "team_a"}
	tagged := mustCreate(t, s, in)
	near := queued("p", "t", "task/t", "", 1)
	near.Tags = []string{"teamxa"} // "_" is no wildcard
	mustCreate(t, s, near)
	page, err := s.ListRuns(ctx, runs.Filter{Project: "p", Tag: "nightly"})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].ID != tagged.ID || !slices.Equal(page.Runs[0].Tags, in.Tags) {
		t.Errorf("ListRuns(tag nightly) = %+v, %v", page.Runs, err)
	}
	if page, err := s.ListRuns(ctx, runs.Filter{Project: "p", Tag: "team_a"}); err != nil || len(page.Runs) != 1 || page.Runs[0].ID != tagged.ID {
		t.Errorf("ListRuns(tag team_a) = %+v, %v; want only %s", page.Runs, err, tagged.ID)
	}
	if page, _ := s.ListRuns(ctx, runs.Filter{Project: "p", Tag: "night"}); len(page.Runs) != 0 {
		t.Errorf("a tag matched a prefix: %v", page.Runs)
	}
	// An idempotency key past its ttl makes a new run.
	k := queued("p", "t", "task/t", "", 2)
	k.IdempotencyKey = "once"
	ttl := at(10)
	k.IdempotencyKeyExpiresAt = &ttl
	first := mustCreate(t, s, k)
	k.CreatedAt = at(5)
	if again, created, err := s.CreateRun(ctx, k); err != nil || created || again.ID != first.ID {
		t.Errorf("within the key's ttl: %v %v %v, want the first run", again.ID, created, err)
	}
	k.CreatedAt = at(11)
	if later, created, err := s.CreateRun(ctx, k); err != nil || !created || later.ID == first.ID {
		t.Errorf("past the key's ttl: %v %v %v, want a new run", later.ID, created, err)
	}
}
