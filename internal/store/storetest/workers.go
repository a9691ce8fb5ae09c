package storetest

import (
	"testing"
	"time"

	"github.com/helmr/helmr/internal/workers"
)

var workerTests = []storeTest{
	{"UpsertAndListWorkers", testWorkers},
	{"UpsertWorkerInvalid", testWorkerInvalid},
}

func capabilities(slots int) workers.Capabilities {
	return workers.Capabilities{
		Arch: "amd64", Tiers: []string{"process", "gvisor"}, Kernel: "6.1.0-18-amd64",
		CPUs: 3.5, MemoryBytes: 7 << 30, Slots: slots, Digests: []string{"sha256:abc", "sha256:def"},
	}
}

// workerIDs returns the IDs of ws, for compact comparisons.
func workerIDs(ws []workers.Worker) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}

func testWorkers(t *testing.T, s Store) {
	ctx := t.Context()
	got, err := s.ListWorkers(ctx, time.Time{})
	if err != nil || len(got) != 0 {
		t.Fatalf("ListWorkers(zero) on an empty store = %v, %v; want none", got, err)
	}
	zone := time.FixedZone("UTC-3", -3*3600)
	in := []workers.Worker{
		{ID: "w-b", Capabilities: capabilities(2), LastSeen: at(10)},
		{ID: "w-a", Capabilities: workers.Capabilities{Arch: "arm64", CPUs: 1, MemoryBytes: 1 << 30, Slots: 1},
			LastSeen: at(20).In(zone).Add(789 * time.Nanosecond)},
		{ID: "w-c", Capabilities: capabilities(4), LastSeen: at(5)},
	}
	for _, w := range in {
		if err := s.UpsertWorker(ctx, w); err != nil {
			t.Fatalf("UpsertWorker(%q): %v", w.ID, err)
		}
	}
	want := map[string]workers.Worker{}
	for _, w := range in {
		w.LastSeen = w.LastSeen.UTC().Truncate(time.Microsecond)
		want[w.ID] = w
	}
	list := func(since time.Time, ids ...string) {
		t.Helper()
		got, err := s.ListWorkers(ctx, since)
		if err != nil {
			t.Fatalf("ListWorkers(%v): %v", since, err)
		}
		wantList := []workers.Worker{}
		for _, id := range ids {
			wantList = append(wantList, want[id])
		}
		if d := diff(wantList, got); d != "" {
			t.Errorf("ListWorkers(%v) mismatch (-want +got):\n%s", since, d)
		}
		for _, w := range got {
			if w.LastSeen.Location() != time.UTC {
				t.Errorf("ListWorkers(%v): worker %s LastSeen in %v, want UTC", since, w.ID, w.LastSeen.Location())
			}
		}
	}
	list(time.Time{}, "w-a", "w-b", "w-c")
	list(at(10), "w-a", "w-b")               // at or after since
	list(at(10).Add(time.Nanosecond), "w-a") // a sub-microsecond since still excludes at(10)
	list(at(20).Add(time.Microsecond))       // nothing seen since
	// An upsert replaces capabilities and last-seen time.
	update := workers.Worker{ID: "w-c", Capabilities: capabilities(8), LastSeen: at(30)}
	update.Capabilities.Tiers = []string{"firecracker"}
	if err := s.UpsertWorker(ctx, update); err != nil {
		t.Fatalf("UpsertWorker(%q) again: %v", update.ID, err)
	}
	want["w-c"] = update
	list(at(10), "w-a", "w-b", "w-c")
	list(at(25), "w-c")
	list(time.Time{}, "w-a", "w-b", "w-c")
	// A zero LastSeen means now.
	before := time.Now().Add(-time.Second)
	if err := s.UpsertWorker(ctx, workers.Worker{ID: "w-d"}); err != nil {
		t.Fatalf("UpsertWorker(zero LastSeen): %v", err)
	}
	if got, err := s.ListWorkers(ctx, before); err != nil || len(got) != 1 || got[0].ID != "w-d" {
		t.Errorf("ListWorkers(%v) after UpsertWorker(zero LastSeen) = %v, %v; want w-d only", before, workerIDs(got), err)
	}
}

func testWorkerInvalid(t *testing.T, s Store) {
	if err := s.UpsertWorker(t.Context(), workers.Worker{LastSeen: at(0)}); err == nil {
		t.Errorf("UpsertWorker(empty id) = nil, want an error")
	}
	if got, err := s.ListWorkers(t.Context(), time.Time{}); err != nil || len(got) != 0 {
		t.Errorf("ListWorkers(zero) after a rejected upsert = %v, %v; want none", workerIDs(got), err)
	}
}
