package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
)

// TestSessions drives session streams end to end against helmr dev: a task
// echoes its input (for await) to its output while a client sends input,
// reads the output over SSE, disconnects and resumes with Last-Event-ID;
// nothing is lost or repeated, a retried append is stored once, and the
// task's metadata shows in the run API.
func TestSessions(t *testing.T) { forEachTier(t, testSessions) }

func testSessions(t *testing.T, tier string) {
	d := startDev(t, tier)
	d.deploy("internal/e2e/testdata/sessions")
	r := d.trigger("sessions", "echo", `null`)
	d.waitStatus(r.ID, runs.StatusRunning, 60*time.Second)

	send := func(key, data string) (int, runs.Record) {
		t.Helper()
		return d.appendRecord(r.ID, "input", key, data)
	}
	// The first connection reads while the task echoes three messages; a
	// retried append (same key, same data) is stored once.
	ctx, disconnect := context.WithCancel(context.Background())
	first := d.readRecords(ctx, r.ID, "output", "")
	for i := 1; i <= 3; i++ {
		st, rec := send(fmt.Sprint("in-", i), fmt.Sprintf(`{"text":"m%d"}`, i))
		if st != http.StatusCreated || rec.Seq != int64(i) {
			t.Fatalf("send input %d = %d %+v, want 201 with seq %d", i, st, rec, i)
		}
	}
	if st, rec := send("in-2", `{"text": "m2"}`); st != http.StatusOK || rec.Seq != 2 {
		t.Errorf("retried input in-2 = %d %+v, want 200 with the first record (seq 2)", st, rec)
	}
	if st, _ := send("in-2", `{"text":"other"}`); st != http.StatusConflict {
		t.Errorf("input in-2 with other data = %d, want 409", st)
	}
	got := collect(t, first, 3)
	disconnect()
	last := got[len(got)-1].Seq

	// While nobody reads: three more messages, and an outside append to
	// the output (retried: stored once).
	for i := 4; i <= 6; i++ {
		if st, rec := send(fmt.Sprint("in-", i), fmt.Sprintf(`{"text":"m%d"}`, i)); st != http.StatusCreated {
			t.Fatalf("send input %d = %d %+v", i, st, rec)
		}
	}
	for i, want := range []int{http.StatusCreated, http.StatusOK} {
		if st, _ := d.appendRecord(r.ID, "output", "ext-1", `{"from":"outside"}`); st != want {
			t.Errorf("outside output append %d = %d, want %d", i+1, st, want)
		}
	}
	if st, _ := d.appendRecord(r.ID, "output", "ext-1", `{"from":"elsewhere"}`); st != http.StatusConflict {
		t.Errorf("outside output append with the key and other data = %d, want 409", st)
	}
	ctx2, disconnect2 := context.WithCancel(context.Background())
	defer disconnect2()
	got = append(got, collect(t, d.readRecords(ctx2, r.ID, "output", strconv.FormatInt(last, 10)), 4)...)

	// Seqs 1..7, each once; the echoes in order, the outside record once.
	var echoes []string
	outside := 0
	for i, rec := range got {
		if rec.Seq != int64(i+1) {
			t.Fatalf("records over both connections have seqs %v, want 1..%d each once", seqs(got), len(got))
		}
		var v struct {
			Echo string `json:"echo"`
			From string `json:"from"`
		}
		_ = json.Unmarshal(rec.Data, &v)
		if v.From == "outside" {
			outside++
		} else {
			echoes = append(echoes, v.Echo)
		}
	}
	if strings.Join(echoes, ",") != "m1,m2,m3,m4,m5,m6" || outside != 1 {
		t.Errorf("output echoes %v and %d outside records, want m1..m6 in order and 1", echoes, outside)
	}

	if st, _ := send("done", `{"done":true}`); st != http.StatusCreated {
		t.Fatalf("send done = %d", st)
	}
	final := d.waitDone(r.ID, 60*time.Second)
	if final.Status != runs.StatusCompleted || canonicalJSON(t, final.Output) != `{"echoed":6,"seen":6}` {
		t.Fatalf("run = %s %s %+v, want COMPLETED with 6 echoes", final.Status, final.Output, final.Error)
	}
	v, err := d.api.GetRunView(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(v.Metadata["echoed"]) != "6" || string(v.Metadata["phase"]) != `"done"` {
		t.Errorf("GET /v1/runs/%s metadata = %s, want echoed 6 and phase done", r.ID, fmtMetadata(v.Metadata))
	}
	// A finished run's streams end after their last record; its input
	// holds every message once.
	in := collectAll(t, d.readRecords(context.Background(), r.ID, "input", ""))
	if len(in) != 7 || in[6].ID != "done" {
		t.Errorf("input stream = %d records (%v), want 7 ending with done", len(in), seqs(in))
	}
	if out := collectAll(t, d.readRecords(context.Background(), r.ID, "output", "5")); len(out) != 2 || out[0].Seq != 6 {
		t.Errorf("output stream after 5 = seqs %v, want 6, 7", seqs(out))
	}
	if st, _ := send("late", `{"text":"late"}`); st != http.StatusConflict {
		t.Errorf("input to a finished run = %d, want 409", st)
	}
}

// waitStatus polls until the run has status want.
func (d *dev) waitStatus(id string, want runs.Status, within time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := d.api.GetRun(context.Background(), id)
		if err != nil {
			d.t.Fatalf("get run %s: %v", id, err)
		}
		if r.Status == want {
			return
		}
		if r.Status.Terminal() || time.Now().After(deadline) {
			d.t.Fatalf("run %s is %s (error %+v), want %s", id, r.Status, r.Error, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// appendRecord posts to a run's session stream with an idempotency key.
func (d *dev) appendRecord(runID, stream, key, data string) (int, runs.Record) {
	d.t.Helper()
	body := fmt.Sprintf(`{"data": %s}`, data)
	req, _ := http.NewRequest(http.MethodPost, d.url+"/v1/runs/"+runID+"/session/"+stream, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp := d.do(req)
	defer resp.Body.Close()
	var rec runs.Record
	_ = json.NewDecoder(resp.Body).Decode(&rec)
	return resp.StatusCode, rec
}

// sseItem is a record read from a session stream, or how the stream ended
// (end: the server's end event; err: the connection failed).
type sseItem struct {
	rec runs.Record
	end bool
	err error
}

// readRecords reads a run's session stream over SSE (from lastID, if set)
// until ctx ends or the stream does. It keeps every record it is sent,
// repeats included: the test checks the server's resume.
func (d *dev) readRecords(ctx context.Context, runID, stream, lastID string) <-chan sseItem {
	d.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/v1/runs/"+runID+"/session/"+stream+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+d.token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	out := make(chan sseItem, 100)
	go func() {
		defer close(out)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- sseItem{err: err}
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			out <- sseItem{err: fmt.Errorf("status %d: %s", resp.StatusCode, b)}
			return
		}
		sc := bufio.NewScanner(resp.Body)
		var event, id, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && event == "end":
				out <- sseItem{end: true}
				return
			case line == "" && data != "":
				var rec runs.Record
				if err := json.Unmarshal([]byte(data), &rec); err != nil || strconv.FormatInt(rec.Seq, 10) != id {
					out <- sseItem{err: fmt.Errorf("bad record (id %q): %s %v", id, data, err)}
					return
				}
				out <- sseItem{rec: rec}
				event, id, data = "", "", ""
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				data += strings.TrimPrefix(line, "data: ")
			}
		}
		out <- sseItem{err: fmt.Errorf("stream closed: %v", sc.Err())}
	}()
	return out
}

// collect takes n records from a stream, failing on an error, an early
// end or a timeout.
func collect(t *testing.T, ch <-chan sseItem, n int) []runs.Record {
	t.Helper()
	var got []runs.Record
	timeout := time.After(60 * time.Second)
	for len(got) < n {
		select {
		case it, ok := <-ch:
			if !ok || it.err != nil || it.end {
				t.Fatalf("stream ended after %d of %d records (%v)", len(got), n, it.err)
			}
			got = append(got, it.rec)
		case <-timeout:
			t.Fatalf("read %d of %d records in 60s", len(got), n)
		}
	}
	return got
}

// collectAll reads a stream until its end event.
func collectAll(t *testing.T, ch <-chan sseItem) []runs.Record {
	t.Helper()
	var got []runs.Record
	timeout := time.After(30 * time.Second)
	for {
		select {
		case it, ok := <-ch:
			if it.end {
				return got
			}
			if !ok || it.err != nil {
				t.Fatalf("stream failed after %d records: %v", len(got), it.err)
			}
			got = append(got, it.rec)
		case <-timeout:
			t.Fatalf("stream did not end in 30s (%d records)", len(got))
		}
	}
}

func seqs(rs []runs.Record) []int64 {
	var out []int64
	for _, r := range rs {
		out = append(out, r.Seq)
	}
	return out
}

func fmtMetadata(md map[string]json.RawMessage) string {
	b, _ := json.Marshal(md)
	return string(b)
}
