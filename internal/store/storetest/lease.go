package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/workers"
)

var leaseTests = []storeTest{
	{"LeaseRunOrder", testLeaseOrder},
	{"LeaseRunFit", testLeaseFit},
	{"LeaseRunConcurrent", testLeaseConcurrent},
	{"LeaseRunWorker", testLeaseWorker},
	{"DropRunHost", testDropRunHost},
}

// anything is an offer every run without digest needs fits.
var anything = offer(workers.Need{CPU: 1e9, MemoryBytes: 1 << 62})

// offer is a worker offering n's CPU, memory and digests.
func offer(n workers.Need) workers.Capabilities {
	return workers.Capabilities{CPUs: n.CPU, MemoryBytes: n.MemoryBytes, Digests: n.Digests}
}

const gib = 1 << 30

func testLeaseOrder(t *testing.T, s Store) {
	ctx := t.Context()
	_, err := s.LeaseRun(ctx, "w1", anything, at(0), 0)
	wantErr(t, "LeaseRun(empty store)", err, errdefs.ErrNotFound)
	var created []runs.Run
	for _, sec := range []int{2, 0, 1} {
		r := newRun("p", "dev", "a")
		r.CreatedAt = at(sec)
		created = append(created, mustCreate(t, s, r))
	}
	for _, i := range []int{1, 2, 0} {
		got, err := s.LeaseRun(ctx, "w1", anything, at(100), 0)
		if err != nil {
			t.Fatalf("LeaseRun(%q): %v", "w1", err)
		}
		want := created[i]
		want.Status, want.WorkerID, want.LastSeq = runs.StatusStarting, "w1", 2
		if d := diff(want, got); d != "" {
			t.Errorf("LeaseRun() mismatch (-want +got):\n%s", d)
		}
		evs, err := s.ListEvents(ctx, got.ID, 1, 0)
		if err != nil || len(evs) != 1 || evs[0].Seq != 2 || !evs[0].Time.Equal(at(100)) {
			t.Fatalf("ListEvents(%q, 1, 0) = %+v, %v; want the lease's status event 2", got.ID, evs, err)
		}
		if d := diff(runs.StatusData{From: runs.StatusQueued, To: runs.StatusStarting}, statusData(t, evs[0])); d != "" {
			t.Errorf("lease event data mismatch (-want +got):\n%s", d)
		}
	}
	_, err = s.LeaseRun(ctx, "w1", anything, at(0), 0)
	wantErr(t, "LeaseRun(none queued)", err, errdefs.ErrNotFound)
}

// testLeaseFit checks that a lease passes over older runs that need more
// than the offer, on either dimension, and that a fit is inclusive.
func testLeaseFit(t *testing.T, s Store) {
	ctx := t.Context()
	needs := map[string]workers.Need{
		"big":   {CPU: 4, MemoryBytes: 8 * gib},
		"small": {CPU: 1, MemoryBytes: 1 * gib},
		"exact": {CPU: 2, MemoryBytes: 2 * gib},
		"none":  {},
		"based": {CPU: 1, Digests: []string{"rootfs:helmr/b@sha256:1", "kernel:k@sha256:2"}},
	}
	created := map[string]runs.Run{}
	for i, n := range []string{"based", "big", "small", "exact", "none"} { // oldest first
		r := newRun("p", "dev", n)
		r.CreatedAt, r.Needs = at(i), needs[n]
		created[n] = mustCreate(t, s, r)
	}
	steps := []struct {
		offer workers.Need
		want  string // "" for errdefs.ErrNotFound
	}{
		{workers.Need{}, "none"},
		// A run needing digests waits for a worker that has them all.
		{workers.Need{CPU: 1, Digests: []string{"rootfs:helmr/b@sha256:1"}}, ""},
		{workers.Need{CPU: 1, Digests: []string{"kernel:k@sha256:2", "rootfs:helmr/b@sha256:9"}}, ""},
		{workers.Need{CPU: 1, Digests: []string{"x", "kernel:k@sha256:2", "rootfs:helmr/b@sha256:1"}}, "based"},
		{workers.Need{CPU: 1, MemoryBytes: 1 * gib}, "small"},
		{workers.Need{CPU: 1, MemoryBytes: 1 * gib}, ""},
		{workers.Need{CPU: 8, MemoryBytes: 1 * gib}, ""},  // enough CPU, too little memory
		{workers.Need{CPU: 1, MemoryBytes: 16 * gib}, ""}, // enough memory, too little CPU
		{workers.Need{CPU: 2, MemoryBytes: 2 * gib}, "exact"},
		{workers.Need{CPU: 4, MemoryBytes: 8 * gib}, "big"},
		{workers.Need{CPU: 1e9, MemoryBytes: 1 << 62}, ""},
	}
	for i, st := range steps {
		got, err := s.LeaseRun(ctx, "w1", offer(st.offer), at(100+i), 0)
		if st.want == "" {
			wantErr(t, name("step ", i, ": LeaseRun(offer ", st.offer, ")"), err, errdefs.ErrNotFound)
			continue
		}
		if err != nil {
			t.Fatalf("step %d: LeaseRun(offer %+v) = %v, want run %q", i, st.offer, err, st.want)
		}
		want := created[st.want]
		want.Status, want.WorkerID, want.LastSeq = runs.StatusStarting, "w1", 2
		if d := diff(want, got); d != "" {
			t.Errorf("step %d: LeaseRun(offer %+v) mismatch (-want %s +got):\n%s", i, st.offer, st.want, d)
		}
	}
}

// testLeaseConcurrent leases runs of two sizes with workers of two sizes
// at once: no run is leased twice, none goes to a worker it does not fit,
// and every run is leased.
func testLeaseConcurrent(t *testing.T, s Store) {
	const n, nworkers = 120, 8
	small := workers.Need{CPU: 0.5, MemoryBytes: gib / 2}
	big := workers.Need{CPU: 4, MemoryBytes: 8 * gib}
	for i := range n {
		r := newRun("p", "dev", "a")
		r.CreatedAt, r.Needs = at(i), small
		if i%3 == 0 {
			r.Needs = big
		}
		mustCreate(t, s, r)
	}
	var mu sync.Mutex
	leased := map[string]string{}
	var wg sync.WaitGroup
	for w := range nworkers {
		worker := name("w", w)
		offer := offer(workers.Need{CPU: 1, MemoryBytes: gib}) // fits small runs only
		if w%2 == 0 {
			offer.CPUs, offer.MemoryBytes = 8, 16*gib
		}
		wg.Go(func() {
			for {
				r, err := s.LeaseRun(t.Context(), worker, offer, time.Now(), 0)
				if err != nil {
					wantErr(t, "LeaseRun", err, errdefs.ErrNotFound)
					return
				}
				if r.Needs.CPU > offer.CPUs || r.Needs.MemoryBytes > offer.MemoryBytes {
					t.Errorf("LeaseRun(%q, offer %+v) = %s needing %+v, which does not fit", worker, offer, r.ID, r.Needs)
				}
				mu.Lock()
				if prev, dup := leased[r.ID]; dup {
					t.Errorf("LeaseRun(%q) = %s, already leased by %s", worker, r.ID, prev)
				}
				leased[r.ID] = worker
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(leased) != n {
		t.Errorf("concurrent LeaseRun leased %d runs, want %d", len(leased), n)
	}
	page, err := s.ListRuns(t.Context(), runs.Filter{Status: runs.StatusQueued})
	if err != nil || len(page.Runs) != 0 {
		t.Errorf("ListRuns(QUEUED) after leasing = %d runs, %v; want 0", len(page.Runs), err)
	}
}

// testLeaseWorker checks that a run needing a given worker (the one that
// holds its workspace) goes to that worker only, while others lease what
// is queued behind it.
func testLeaseWorker(t *testing.T, s Store) {
	ctx := t.Context()
	pinned := newRun("p", "dev", "pinned")
	pinned.CreatedAt, pinned.Needs = at(0), workers.Need{Host: "h2"}
	pinned = mustCreate(t, s, pinned)
	free := newRun("p", "dev", "free")
	free.CreatedAt = at(1)
	free = mustCreate(t, s, free)
	h1, h2 := anything, anything
	h1.Host, h2.Host = "h1", "h2"
	if got, err := s.LeaseRun(ctx, "w1", h1, at(10), 0); err != nil || got.ID != free.ID {
		t.Errorf("LeaseRun(host h1) = %s, %v; want the unpinned run %s", got.ID, err, free.ID)
	}
	_, err := s.LeaseRun(ctx, "w1", h1, at(11), 0)
	wantErr(t, "LeaseRun(host h1, only a run pinned to h2 queued)", err, errdefs.ErrNotFound)
	if got, err := s.LeaseRun(ctx, "w2", h2, at(12), 0); err != nil || got.ID != pinned.ID {
		t.Errorf("LeaseRun(host h2) = %s, %v; want the pinned run %s", got.ID, err, pinned.ID)
	}
}

// testDropRunHost frees a run pinned to a host that is gone: any worker
// then leases it; a run that is not QUEUED, or no longer needs that host,
// is a conflict.
func testDropRunHost(t *testing.T, s Store) {
	ctx := t.Context()
	pinned := newRun("p", "dev", "pinned")
	pinned.CreatedAt, pinned.Needs = at(0), workers.Need{Host: "gone"}
	pinned = mustCreate(t, s, pinned)
	h1 := anything
	h1.Host = "h1"
	_, err := s.LeaseRun(ctx, "w1", h1, at(1), 0)
	wantErr(t, "LeaseRun(host h1, only a run pinned to gone queued)", err, errdefs.ErrNotFound)
	wantErr(t, "DropRunHost(another host)", s.DropRunHost(ctx, pinned.ID, "h1"), errdefs.ErrConflict)
	wantErr(t, "DropRunHost(no host)", s.DropRunHost(ctx, pinned.ID, ""), errdefs.ErrConflict)
	wantErr(t, "DropRunHost(missing)", s.DropRunHost(ctx, "run_missing", "gone"), errdefs.ErrNotFound)
	if err := s.DropRunHost(ctx, pinned.ID, "gone"); err != nil {
		t.Fatalf("DropRunHost(gone) = %v", err)
	}
	if got, _ := s.GetRun(ctx, pinned.ID); got.Needs.Host != "" || got.Status != runs.StatusQueued {
		t.Errorf("after DropRunHost: %s needs host %q, want QUEUED with none", got.Status, got.Needs.Host)
	}
	wantErr(t, "DropRunHost(twice)", s.DropRunHost(ctx, pinned.ID, "gone"), errdefs.ErrConflict)
	got, err := s.LeaseRun(ctx, "w1", h1, at(2), 0)
	if err != nil || got.ID != pinned.ID {
		t.Fatalf("LeaseRun(host h1) after the drop = %s, %v; want %s", got.ID, err, pinned.ID)
	}
	other := newRun("p", "dev", "other")
	other.CreatedAt, other.Needs = at(3), workers.Need{Host: "gone"}
	other = mustCreate(t, s, other)
	if _, _, err := s.Transition(ctx, other.ID, runs.Transition{From: []runs.Status{runs.StatusQueued}, To: runs.StatusCanceled, Time: at(4)}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "DropRunHost(canceled run)", s.DropRunHost(ctx, other.ID, "gone"), errdefs.ErrConflict)
}
