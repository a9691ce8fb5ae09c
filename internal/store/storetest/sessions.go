package storetest

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

var sessionTests = []storeTest{
	{"SessionAppendAndList", testSessionAppend},
	{"SessionIdempotency", testSessionIdempotency},
	{"SessionEndedRun", testSessionEnded},
	{"SessionAppendConcurrent", testSessionConcurrent},
	{"RunMetadata", testRunMetadata},
}

func record(id, data string, sec int) runs.NewRecord {
	return runs.NewRecord{ID: id, Time: at(sec), Data: json.RawMessage(data)}
}

func mustAppend(t *testing.T, s Store, runID, stream string, rec runs.NewRecord) runs.Record {
	t.Helper()
	got, created, err := s.AppendRecord(t.Context(), runID, stream, rec)
	if err != nil || !created {
		t.Fatalf("AppendRecord(%q, %s, %+v) = %v, %v, want created", runID, stream, rec, created, err)
	}
	return got
}

func seqsOf(rs []runs.Record) []int64 {
	out := []int64{}
	for _, r := range rs {
		out = append(out, r.Seq)
	}
	return out
}

func testSessionAppend(t *testing.T, s Store) {
	ctx := t.Context()
	r := mustCreate(t, s, newRun("p", "dev", "a"))
	in := record("", `{"text":"hi"}`, 1)
	in.Time = time.Date(2025, 6, 1, 14, 0, 0, 999, time.FixedZone("CEST", 7200))
	got := mustAppend(t, s, r.ID, runs.StreamInput, in)
	want := runs.Record{RunID: r.ID, Stream: runs.StreamInput, Seq: 1, Time: in.Time.UTC().Truncate(time.Microsecond), Data: in.Data}
	if d := diff(want, got); d != "" {
		t.Errorf("AppendRecord mismatch (-want +got):\n%s", d)
	}
	mustAppend(t, s, r.ID, runs.StreamInput, record("b", `2`, 2))
	mustAppend(t, s, r.ID, runs.StreamInput, record("c", `"three"`, 3))
	if o := mustAppend(t, s, r.ID, runs.StreamOutput, record("b", `"out"`, 4)); o.Seq != 1 {
		t.Errorf("first output record seq = %d, want 1 (streams count apart)", o.Seq)
	}
	tests := []struct {
		after    int64
		limit    int
		wantSeqs []int64
	}{
		{0, 0, []int64{1, 2, 3}},
		{1, 0, []int64{2, 3}},
		{1, 1, []int64{2}},
		{3, 10, []int64{}},
	}
	for _, tt := range tests {
		rs, err := s.ListRecords(ctx, r.ID, runs.StreamInput, tt.after, tt.limit)
		if err != nil {
			t.Fatalf("ListRecords(%q, input, %d, %d): %v", r.ID, tt.after, tt.limit, err)
		}
		if d := diff(tt.wantSeqs, seqsOf(rs)); d != "" {
			t.Errorf("ListRecords(%q, input, %d, %d) seqs = %v, want %v", r.ID, tt.after, tt.limit, seqsOf(rs), tt.wantSeqs)
		}
	}
	rs, err := s.ListRecords(ctx, r.ID, runs.StreamInput, 0, 0)
	if err != nil || len(rs) != 3 {
		t.Fatalf("ListRecords(%q, input) = %v, %v", r.ID, rs, err)
	}
	if d := diff(want, rs[0]); d != "" {
		t.Errorf("ListRecords()[0] mismatch (-want +got):\n%s", d)
	}
	if rs[1].ID != "b" || string(rs[2].Data) != `"three"` {
		t.Errorf("ListRecords()[1:] = %+v, want ids and data as appended", rs[1:])
	}
	_, _, err = s.AppendRecord(ctx, "run_missing", runs.StreamInput, record("", `1`, 1))
	wantErr(t, `AppendRecord("run_missing")`, err, errdefs.ErrNotFound)
	_, err = s.ListRecords(ctx, "run_missing", runs.StreamOutput, 0, 0)
	wantErr(t, `ListRecords("run_missing")`, err, errdefs.ErrNotFound)
}

func testSessionIdempotency(t *testing.T, s Store) {
	ctx := t.Context()
	r := mustCreate(t, s, newRun("p", "dev", "a"))
	first := mustAppend(t, s, r.ID, runs.StreamOutput, record("k1", `{"n":1}`, 1))
	mustAppend(t, s, r.ID, runs.StreamOutput, record("k2", `{"n":2}`, 2))
	before := countRows(t, s)

	again, created, err := s.AppendRecord(ctx, r.ID, runs.StreamOutput, record("k1", `{"n":1}`, 9))
	if err != nil || created {
		t.Fatalf("AppendRecord(repeat of k1) = %v, %v, want the first record, not created", created, err)
	}
	if d := diff(first, again); d != "" {
		t.Errorf("AppendRecord(repeat of k1) mismatch (-want +got):\n%s", d)
	}
	_, _, err = s.AppendRecord(ctx, r.ID, runs.StreamOutput, record("k1", `{"n":3}`, 9))
	wantErr(t, "AppendRecord(k1, other data)", err, errdefs.ErrConflict)
	if after := countRows(t, s); before != nil && diff(before, after) != "" {
		t.Errorf("repeated appends changed rows (-before +after):\n%s", diff(before, after))
	}
	// The same id in the other stream is another append.
	if in := mustAppend(t, s, r.ID, runs.StreamInput, record("k1", `{"n":3}`, 3)); in.Seq != 1 {
		t.Errorf("input k1 seq = %d, want 1", in.Seq)
	}
	rs, err := s.ListRecords(ctx, r.ID, runs.StreamOutput, 0, 0)
	if err != nil || len(rs) != 2 {
		t.Errorf("ListRecords(output) = %d records, %v; want 2", len(rs), err)
	}
}

func testSessionEnded(t *testing.T, s Store) {
	ctx := t.Context()
	r := mustCreate(t, s, newRun("p", "dev", "a"))
	first := mustAppend(t, s, r.ID, runs.StreamInput, record("k1", `"a"`, 1))
	if _, _, err := s.Transition(ctx, r.ID, runs.Transition{From: []runs.Status{runs.StatusQueued}, To: runs.StatusCanceled, Time: at(2)}); err != nil {
		t.Fatalf("Transition(%q, CANCELED): %v", r.ID, err)
	}
	for _, stream := range []string{runs.StreamInput, runs.StreamOutput} {
		_, _, err := s.AppendRecord(ctx, r.ID, stream, record("k2", `"b"`, 3))
		wantErr(t, "AppendRecord("+stream+" of an ended run)", err, errdefs.ErrConflict)
	}
	// A retry of an append that was stored before the run ended still
	// answers with the record.
	again, created, err := s.AppendRecord(ctx, r.ID, runs.StreamInput, record("k1", `"a"`, 4))
	if err != nil || created || again.Seq != first.Seq {
		t.Errorf("AppendRecord(retry after the end) = %+v, %v, %v; want record %d, not created", again, created, err, first.Seq)
	}
}

func testSessionConcurrent(t *testing.T, s Store) {
	const appenders, each = 6, 10
	r := mustCreate(t, s, newRun("p", "dev", "a"))
	var wg sync.WaitGroup
	for i := range appenders {
		wg.Go(func() {
			for j := range each {
				// Every append twice: the repeat must not add a record.
				rec := record(name("w", i, "-", j), name(`"`, i, "-", j, `"`), j)
				for range 2 {
					if _, _, err := s.AppendRecord(t.Context(), r.ID, runs.StreamOutput, rec); err != nil {
						t.Errorf("AppendRecord(%q): %v", r.ID, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	rs, err := s.ListRecords(t.Context(), r.ID, runs.StreamOutput, 0, 1000)
	if err != nil || len(rs) != appenders*each {
		t.Fatalf("ListRecords(%q) = %d records, %v; want %d", r.ID, len(rs), err, appenders*each)
	}
	for i, rec := range rs {
		if rec.Seq != int64(i+1) {
			t.Fatalf("ListRecords(%q)[%d].Seq = %d, want %d (no gaps)", r.ID, i, rec.Seq, i+1)
		}
	}
}

func testRunMetadata(t *testing.T, s Store) {
	ctx := t.Context()
	r := mustCreate(t, s, newRun("p", "dev", "a"))
	other := mustCreate(t, s, newRun("p", "dev", "a"))
	if md, err := s.Metadata(ctx, r.ID); err != nil || md == nil || len(md) != 0 {
		t.Errorf("Metadata(%q) = %v, %v; want empty", r.ID, md, err)
	}
	sets := []struct{ key, value string }{{"progress", `0.5`}, {"step", `"clone"`}, {"progress", `{"done":1}`}}
	for _, st := range sets {
		if err := s.SetMetadata(ctx, r.ID, st.key, json.RawMessage(st.value)); err != nil {
			t.Fatalf("SetMetadata(%q, %q): %v", r.ID, st.key, err)
		}
	}
	md, err := s.Metadata(ctx, r.ID)
	if err != nil {
		t.Fatalf("Metadata(%q): %v", r.ID, err)
	}
	want := map[string]json.RawMessage{"progress": json.RawMessage(`{"done":1}`), "step": json.RawMessage(`"clone"`)}
	if d := diff(want, md); d != "" {
		t.Errorf("Metadata(%q) mismatch (-want +got):\n%s", r.ID, d)
	}
	if md, err := s.Metadata(ctx, other.ID); err != nil || len(md) != 0 {
		t.Errorf("Metadata(%q) = %v, %v; want empty (metadata is per run)", other.ID, md, err)
	}
	wantErr(t, `SetMetadata("run_missing")`, s.SetMetadata(ctx, "run_missing", "k", json.RawMessage(`1`)), errdefs.ErrNotFound)
	_, err = s.Metadata(ctx, "run_missing")
	wantErr(t, `Metadata("run_missing")`, err, errdefs.ErrNotFound)
}
