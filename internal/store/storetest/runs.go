package storetest

import (
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/workers"
)

var runTests = []storeTest{
	{"CreateAndGetRun", testCreateAndGetRun},
	{"CreateRunTimesUTC", testCreateRunTimesUTC},
	{"CreateRunIdempotency", testIdempotency},
	{"CreateRunIdempotencyConcurrent", testIdempotencyConcurrent},
	{"Transition", testTransition},
	{"TransitionConflictNotFound", testTransitionErrors},
	{"RunNeeds", testNeeds},
	{"RunNeedsInvalid", testNeedsInvalid},
}

func testCreateAndGetRun(t *testing.T, s Store) {
	ctx := t.Context()
	in := newRun("p", "dev", "fix-bug")
	in.CreatedAt = at(0)
	in.ReplayOf = "run_original"
	in.ParentID, in.RootID = "run_parent", "run_root"
	got := mustCreate(t, s, in)
	if !strings.HasPrefix(got.ID, "run_") {
		t.Errorf("CreateRun().ID = %q, want prefix run_", got.ID)
	}
	want := in
	want.ID, want.Status, want.LastSeq, want.Kind = got.ID, runs.StatusQueued, 1, runs.KindTask
	if d := diff(want, got); d != "" {
		t.Errorf("CreateRun(%+v) mismatch (-want +got):\n%s", in, d)
	}
	stored, err := s.GetRun(ctx, got.ID)
	if err != nil {
		t.Fatalf("GetRun(%q): %v", got.ID, err)
	}
	if d := diff(got, stored); d != "" {
		t.Errorf("GetRun(%q) mismatch (-created +stored):\n%s", got.ID, d)
	}
	evs, err := s.ListEvents(ctx, got.ID, 0, 0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("ListEvents(%q, 0, 0) = %v, %v, want 1 event", got.ID, evs, err)
	}
	if evs[0].Seq != 1 || !evs[0].Time.Equal(in.CreatedAt) || evs[0].RunID != got.ID {
		t.Errorf("first event = %+v, want seq 1 at %v", evs[0], in.CreatedAt)
	}
	if d := diff(runs.StatusData{To: runs.StatusQueued}, statusData(t, evs[0])); d != "" {
		t.Errorf("first event data mismatch (-want +got):\n%s", d)
	}
	// An explicit ID is kept; an empty payload stays empty.
	r := newRun("p", "dev", "fix-bug")
	r.ID, r.Payload = "run_explicit", nil
	if got := mustCreate(t, s, r); got.ID != "run_explicit" || got.Payload != nil {
		t.Errorf("CreateRun(ID %q, nil payload) = %q, %s", r.ID, got.ID, got.Payload)
	}
	_, err = s.GetRun(ctx, "run_missing")
	wantErr(t, `GetRun("run_missing")`, err, errdefs.ErrNotFound)
}

func testCreateRunTimesUTC(t *testing.T, s Store) {
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	created := time.Date(2025, 3, 4, 10, 11, 12, 123456789, zone)
	in := newRun("p", "dev", "t")
	in.CreatedAt = created
	got := mustCreate(t, s, in)
	stored, err := s.GetRun(t.Context(), got.ID)
	if err != nil {
		t.Fatalf("GetRun(%q): %v", got.ID, err)
	}
	want := created.Truncate(time.Microsecond)
	for _, c := range []struct {
		name string
		t    time.Time
	}{{"CreateRun", got.CreatedAt}, {"GetRun", stored.CreatedAt}} {
		if !c.t.Equal(want) || c.t.Location() != time.UTC {
			t.Errorf("%s().CreatedAt = %v (%v), want %v in UTC", c.name, c.t, c.t.Location(), want.UTC())
		}
	}
	// A zero CreatedAt means now.
	before := time.Now().Add(-time.Second)
	if now := mustCreate(t, s, newRun("p", "dev", "t")); now.CreatedAt.Before(before) {
		t.Errorf("CreateRun(zero CreatedAt).CreatedAt = %v, want about now", now.CreatedAt)
	}
}

func testIdempotency(t *testing.T, s Store) {
	ctx := t.Context()
	first := newRun("p", "dev", "a")
	first.IdempotencyKey = "k1"
	orig := mustCreate(t, s, first)
	tests := []struct {
		name         string
		project, env string
		task, key    string
		wantSame     bool
	}{
		{"same key", "p", "dev", "a", "k1", true},
		{"other task", "p", "dev", "b", "k1", false},
		{"other env", "p", "prod", "a", "k1", false},
		{"other project", "q", "dev", "a", "k1", false},
		{"other key", "p", "dev", "a", "k2", false},
		{"no key", "p", "dev", "a", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRun(tt.project, tt.env, tt.task)
			r.IdempotencyKey = tt.key
			r.Payload = json.RawMessage(`"different payload"`)
			got, created, err := s.CreateRun(ctx, r)
			if err != nil {
				t.Fatalf("CreateRun(key %q): %v", tt.key, err)
			}
			if same := got.ID == orig.ID; same != tt.wantSame || created == tt.wantSame {
				t.Errorf("CreateRun(%s/%s/%s key %q) = %s, created %v; want same run %v", tt.project, tt.env, tt.task, tt.key, got.ID, created, tt.wantSame)
			}
			if tt.wantSame {
				if d := diff(orig, got); d != "" {
					t.Errorf("CreateRun(repeat key) mismatch (-first +repeat):\n%s", d)
				}
			}
		})
	}
	evs, err := s.ListEvents(ctx, orig.ID, 0, 0)
	if err != nil || len(evs) != 1 {
		t.Errorf("ListEvents(%q) = %d events, %v; want 1 (a repeat appends nothing)", orig.ID, len(evs), err)
	}
}

func testIdempotencyConcurrent(t *testing.T, s Store) {
	const callers = 8
	r := newRun("p", "dev", "a")
	r.IdempotencyKey = "race"
	var mu sync.Mutex
	got := map[string]int{}
	creates := 0
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			run, created, err := s.CreateRun(t.Context(), r)
			if err != nil {
				t.Errorf("CreateRun(key %q) concurrently: %v", r.IdempotencyKey, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			got[run.ID]++
			if created {
				creates++
			}
		})
	}
	wg.Wait()
	if len(got) != 1 || creates != 1 {
		t.Errorf("%d concurrent CreateRun(key %q) = runs %v, %d created; want one run, created once", callers, r.IdempotencyKey, got, creates)
	}
}

func testTransition(t *testing.T, s Store) {
	ctx := t.Context()
	r := mustCreate(t, s, newRun("p", "dev", "a"))
	started, finished := at(10), at(20)
	failure := &runs.Error{Class: runs.ClassTaskProcess, Message: "exit status 1"}
	steps := []struct {
		tr     runs.Transition
		change func(*runs.Run)
	}{
		{runs.Transition{From: []runs.Status{runs.StatusQueued}, To: runs.StatusStarting, WorkerID: "w1", Tier: "process", Time: at(5)},
			func(r *runs.Run) { r.Status, r.WorkerID, r.Tier = runs.StatusStarting, "w1", "process" }},
		{runs.Transition{From: []runs.Status{runs.StatusStarting}, To: runs.StatusRunning, StartedAt: &started, Time: at(10)},
			func(r *runs.Run) { r.Status, r.StartedAt = runs.StatusRunning, &started }},
		{runs.Transition{From: []runs.Status{runs.StatusRunning, runs.StatusWaiting}, To: runs.StatusFailed,
			Output: json.RawMessage(`{"partial":true}`), Error: failure, FinishedAt: &finished, Time: at(20)},
			func(r *runs.Run) {
				r.Status, r.Output, r.Error, r.FinishedAt = runs.StatusFailed, json.RawMessage(`{"partial":true}`), failure, &finished
			}},
	}
	want := r
	for i, st := range steps {
		from := want.Status
		st.change(&want)
		want.LastSeq++
		got, ev, err := s.Transition(ctx, r.ID, st.tr)
		if err != nil {
			t.Fatalf("Transition(%q, %s→%s): %v", r.ID, from, st.tr.To, err)
		}
		if d := diff(want, got); d != "" {
			t.Errorf("Transition %d mismatch (-want +got):\n%s", i, d)
		}
		if ev.Seq != want.LastSeq || ev.RunID != r.ID || !ev.Time.Equal(st.tr.Time) {
			t.Errorf("Transition %d event = %+v, want seq %d at %v", i, ev, want.LastSeq, st.tr.Time)
		}
		if d := diff(runs.StatusData{From: from, To: st.tr.To, Error: st.tr.Error}, statusData(t, ev)); d != "" {
			t.Errorf("Transition %d event data mismatch (-want +got):\n%s", i, d)
		}
		stored, err := s.GetRun(ctx, r.ID)
		if err != nil || diff(got, stored) != "" {
			t.Errorf("GetRun(%q) after transition %d = %+v, %v; want %+v", r.ID, i, stored, err, got)
		}
	}
	evs, err := s.ListEvents(ctx, r.ID, 0, 0)
	if err != nil || len(evs) != 4 {
		t.Fatalf("ListEvents(%q) = %d events, %v; want 4", r.ID, len(evs), err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Errorf("ListEvents(%q)[%d].Seq = %d, want %d", r.ID, i, e.Seq, i+1)
		}
	}
}

func testTransitionErrors(t *testing.T, s Store) {
	ctx := t.Context()
	r := mustCreate(t, s, newRun("p", "dev", "a"))
	_, _, err := s.Transition(ctx, r.ID, runs.Transition{From: []runs.Status{runs.StatusRunning}, To: runs.StatusCompleted, WorkerID: "w9"})
	wantErr(t, "Transition(QUEUED run, from RUNNING)", err, errdefs.ErrConflict)
	if err != nil && err.Error() == errdefs.ErrConflict.Error() {
		t.Errorf("Transition conflict error = %q, want context around %q", err, errdefs.ErrConflict)
	}
	got, err := s.GetRun(ctx, r.ID)
	if err != nil || diff(r, got) != "" {
		t.Errorf("GetRun(%q) after conflict = %+v, %v; want unchanged %+v", r.ID, got, err, r)
	}
	_, _, err = s.Transition(ctx, "run_missing", runs.Transition{From: []runs.Status{runs.StatusQueued}, To: runs.StatusStarting})
	wantErr(t, `Transition("run_missing")`, err, errdefs.ErrNotFound)
	_, _, err = s.Transition(ctx, r.ID, runs.Transition{To: runs.StatusStarting})
	wantErr(t, "Transition(empty From)", err, errdefs.ErrInvalid)
}

// testNeeds checks that a run's needs come back from every read.
func testNeeds(t *testing.T, s Store) {
	ctx := t.Context()
	tests := []struct {
		name  string
		needs workers.Need
	}{
		{"none", workers.Need{}},
		{"fractional cpu", workers.Need{CPU: 0.25, MemoryBytes: 1}},
		{"large", workers.Need{CPU: 64, MemoryBytes: 1 << 40}},
		{"typical", workers.Need{CPU: 1.5, MemoryBytes: 3 << 30}},
		{"built at deploy", workers.Need{CPU: 1, Digests: []string{"rootfs:helmr/b@sha256:1", "kernel:k@sha256:2"}, Image: "sha256:3", BaseDigest: "sha256:4"}},
		{"on a workspace's worker", workers.Need{CPU: 1, Host: "h7"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := newRun("p", "dev", name("needs-", i))
			in.Needs = tt.needs
			created := mustCreate(t, s, in)
			got := map[string]workers.Need{"CreateRun": created.Needs}
			if r, err := s.GetRun(ctx, created.ID); err != nil {
				t.Errorf("GetRun(%q): %v", created.ID, err)
			} else {
				got["GetRun"] = r.Needs
			}
			page, err := s.ListRuns(ctx, runs.Filter{TaskID: in.TaskID})
			if err != nil || len(page.Runs) != 1 {
				t.Errorf("ListRuns(task %q) = %d runs, %v; want 1", in.TaskID, len(page.Runs), err)
			} else {
				got["ListRuns"] = page.Runs[0].Needs
			}
			r, _, err := s.Transition(ctx, created.ID, runs.Transition{
				From: []runs.Status{runs.StatusQueued}, To: runs.StatusCanceled, Time: at(1)})
			if err != nil {
				t.Errorf("Transition(%q, QUEUED→CANCELED): %v", created.ID, err)
			} else {
				got["Transition"] = r.Needs
			}
			for call, n := range got {
				if d := diff(tt.needs, n); d != "" {
					t.Errorf("%s().Needs mismatch (-want +got):\n%s", call, d)
				}
			}
		})
	}
}

func testNeedsInvalid(t *testing.T, s Store) {
	before := countRows(t, s)
	for _, n := range []workers.Need{
		{CPU: -1},
		{MemoryBytes: -1},
		{CPU: math.NaN()},
		{CPU: math.Inf(1)},
	} {
		r := newRun("p", "dev", "a")
		r.Needs = n
		_, _, err := s.CreateRun(t.Context(), r)
		wantErr(t, name("CreateRun(needs ", n, ")"), err, errdefs.ErrInvalid)
	}
	if d := diff(before, countRows(t, s)); d != "" {
		t.Errorf("row counts after rejected CreateRun mismatch (-before +after):\n%s", d)
	}
}
