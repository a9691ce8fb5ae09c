package storetest

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

var eventTests = []storeTest{
	{"AppendAndListEvents", testAppendEvents},
	{"AppendEventsConcurrent", testAppendConcurrent},
}

func logEvents(n int, line string) []runs.NewEvent {
	evs := make([]runs.NewEvent, n)
	for i := range evs {
		data, _ := json.Marshal(runs.LogData{Stream: "stdout", Line: name(line, " ", i)})
		evs[i] = runs.NewEvent{Type: runs.EventLog, Time: at(i), Data: data}
	}
	return evs
}

func testAppendEvents(t *testing.T, s Store) {
	ctx := t.Context()
	r := mustCreate(t, s, newRun("p", "dev", "a"))
	in := logEvents(3, "line")
	in[1].Time = time.Date(2025, 6, 1, 14, 0, 0, 999, time.FixedZone("CEST", 7200))
	got, err := s.AppendEvents(ctx, r.ID, in)
	if err != nil {
		t.Fatalf("AppendEvents(%q, 3 events): %v", r.ID, err)
	}
	var want []runs.Event
	for i, e := range in {
		want = append(want, runs.Event{RunID: r.ID, Seq: int64(i + 2), Type: e.Type, Time: e.Time.Truncate(time.Microsecond), Data: e.Data})
	}
	if d := diff(want, got); d != "" {
		t.Errorf("AppendEvents mismatch (-want +got):\n%s", d)
	}
	if got[1].Time.Location() != time.UTC {
		t.Errorf("AppendEvents()[1].Time = %v, want UTC", got[1].Time)
	}
	tests := []struct {
		after    int64
		limit    int
		wantSeqs []int64
	}{
		{0, 0, []int64{1, 2, 3, 4}},
		{1, 0, []int64{2, 3, 4}},
		{2, 1, []int64{3}},
		{4, 10, []int64{}},
	}
	for _, tt := range tests {
		evs, err := s.ListEvents(ctx, r.ID, tt.after, tt.limit)
		if err != nil {
			t.Fatalf("ListEvents(%q, %d, %d): %v", r.ID, tt.after, tt.limit, err)
		}
		seqs := []int64{}
		for _, e := range evs {
			seqs = append(seqs, e.Seq)
		}
		if d := diff(tt.wantSeqs, seqs); d != "" {
			t.Errorf("ListEvents(%q, %d, %d) seqs = %v, want %v", r.ID, tt.after, tt.limit, seqs, tt.wantSeqs)
		}
		if len(evs) > 0 && tt.after >= 1 {
			if d := diff(want[tt.after-1], evs[0]); d != "" {
				t.Errorf("ListEvents(%q, %d, %d)[0] mismatch (-want +got):\n%s", r.ID, tt.after, tt.limit, d)
			}
		}
	}
	if stored, err := s.GetRun(ctx, r.ID); err != nil || stored.LastSeq != 4 {
		t.Errorf("GetRun(%q).LastSeq = %d, %v; want 4", r.ID, stored.LastSeq, err)
	}
	_, err = s.AppendEvents(ctx, "run_missing", in)
	wantErr(t, `AppendEvents("run_missing")`, err, errdefs.ErrNotFound)
	_, err = s.ListEvents(ctx, "run_missing", 0, 0)
	wantErr(t, `ListEvents("run_missing")`, err, errdefs.ErrNotFound)
}

func testAppendConcurrent(t *testing.T, s Store) {
	const appenders, batches, size = 8, 25, 4
	r := mustCreate(t, s, newRun("p", "dev", "a"))
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for range appenders {
		wg.Go(func() {
			for range batches {
				evs, err := s.AppendEvents(t.Context(), r.ID, logEvents(size, "x"))
				if err != nil {
					t.Errorf("AppendEvents(%q): %v", r.ID, err)
					return
				}
				mu.Lock()
				for i, e := range evs {
					if seen[e.Seq] || (i > 0 && e.Seq != evs[i-1].Seq+1) {
						t.Errorf("AppendEvents(%q) seq %d duplicated or not consecutive", r.ID, e.Seq)
					}
					seen[e.Seq] = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	const total = 1 + appenders*batches*size
	evs, err := s.ListEvents(t.Context(), r.ID, 0, total+10)
	if err != nil || len(evs) != total {
		t.Fatalf("ListEvents(%q) = %d events, %v; want %d", r.ID, len(evs), err, total)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("ListEvents(%q)[%d].Seq = %d, want %d (no gaps)", r.ID, i, e.Seq, i+1)
		}
	}
	if got, err := s.GetRun(t.Context(), r.ID); err != nil || got.LastSeq != total {
		t.Errorf("GetRun(%q).LastSeq = %d, %v; want %d", r.ID, got.LastSeq, err, total)
	}
}
