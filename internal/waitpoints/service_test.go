package waitpoints_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
	"github.com/helmr/helmr/internal/waitpoints"
	"github.com/helmr/helmr/internal/workers"
)

type fixture struct {
	runs  *runs.Service
	waits *waitpoints.Service
	now   time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "helmr.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{now: time.Now().UTC()}
	f.runs = runs.NewService(st, st, st, runs.NewBroker(), slog.New(slog.DiscardHandler))
	f.waits = waitpoints.NewService(st, f.runs, slog.New(slog.DiscardHandler))
	f.waits.SetClock(func() time.Time { return f.now })
	f.waits.BaseURL = "http://cp.example"
	f.runs.Ended = func(ctx context.Context, r runs.Run) {
		if err := f.waits.CancelForRun(ctx, r); err != nil {
			t.Errorf("CancelForRun(%s): %v", r.ID, err)
		}
	}
	task := deployments.TaskManifest{ID: "a", Module: "bundles/a.mjs", Export: "a", HasRun: true,
		Sandbox: &deployments.SandboxManifest{Name: "s", Image: &deployments.ImageManifest{Name: "i",
			Steps: []deployments.Step{{Kind: "from", Ref: "helmr/bookworm-node22"}}}}}
	if _, err := st.CreateDeployment(t.Context(), deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{task}},
		Files:    map[string][]byte{"bundles/a.mjs": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	return f
}

// running triggers a run and brings it to RUNNING.
func (f *fixture) running(t *testing.T) runs.Run {
	t.Helper()
	ctx := t.Context()
	r, _, err := f.runs.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.runs.Lease(ctx, "w", workers.Capabilities{CPUs: 4, MemoryBytes: 1 << 32}); err != nil {
		t.Fatal(err)
	}
	r, err = f.runs.Started(ctx, r.ID, "w", "process", runs.SystemData{Message: "started"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fixture) token(t *testing.T, req waitpoints.CreateRequest) waitpoints.Waitpoint {
	t.Helper()
	if req.Kind == "" {
		req.Kind = waitpoints.KindToken
	}
	req.Project, req.Env = "p", "dev"
	w, created, err := f.waits.Create(t.Context(), req)
	if err != nil || !created {
		t.Fatalf("Create(%+v) = %v, %v", req, created, err)
	}
	return w
}

func TestCompleteTwice(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	w := f.token(t, waitpoints.CreateRequest{})
	got, err := f.waits.Complete(ctx, w.ID, json.RawMessage(`{"b": 1, "a": [true]}`))
	if err != nil || got.Status != waitpoints.StatusCompleted || string(got.Data) != `{"a":[true],"b":1}` {
		t.Fatalf("Complete() = %s %s, %v; want COMPLETED with canonical data", got.Status, got.Data, err)
	}
	// The same data, written differently, is the same completion.
	if again, err := f.waits.Complete(ctx, w.ID, json.RawMessage(`{"a":[true],"b":1}`)); err != nil || again.Status != waitpoints.StatusCompleted {
		t.Errorf("Complete(same data) = %s, %v; want COMPLETED, no error", again.Status, err)
	}
	if _, err := f.waits.Complete(ctx, w.ID, json.RawMessage(`{"a":[false]}`)); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Complete(other data) error = %v, want errdefs.ErrConflict", err)
	}
	if _, err := f.waits.Cancel(ctx, w.ID, ""); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Cancel(completed) error = %v, want errdefs.ErrConflict", err)
	}
}

func TestBadInput(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	w := f.token(t, waitpoints.CreateRequest{})
	if _, err := f.waits.Complete(ctx, w.ID, json.RawMessage(`{"a":`)); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Complete(malformed JSON) error = %v, want errdefs.ErrInvalid", err)
	}
	if _, err := f.waits.Complete(ctx, "wp_nope", nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Complete(unknown) error = %v, want errdefs.ErrNotFound", err)
	}
	for _, req := range []waitpoints.CreateRequest{
		{Kind: "nope"},
		{Kind: waitpoints.KindHuman},
		{Kind: waitpoints.KindTimer},
		{Kind: waitpoints.KindToken, TimeoutSeconds: -1},
		{Kind: waitpoints.KindToken, Schema: json.RawMessage(`{}`)},
		{Kind: waitpoints.KindHuman, DisplayText: "x", Schema: json.RawMessage(`[1]`)},
		{Kind: waitpoints.KindHuman, DisplayText: "x", Schema: json.RawMessage(`{"type":"thing"}`)},
		{Kind: waitpoints.KindToken, Tags: []string{""}},
	} {
		req.Project, req.Env = "p", "dev"
		if _, _, err := f.waits.Create(ctx, req); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Create(%+v) error = %v, want errdefs.ErrInvalid", req, err)
		}
	}
}

func TestCancelAndCallback(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	w := f.token(t, waitpoints.CreateRequest{})
	prefix := "http://cp.example/v1/tokens/" + w.ID + "/callback/"
	secret, ok := strings.CutPrefix(w.CallbackURL, prefix)
	if !ok || len(secret) != 64 {
		t.Fatalf("CallbackURL = %q, want %s<64 hex characters>", w.CallbackURL, prefix)
	}
	got, _ := f.waits.Get(ctx, w.ID)
	if got.CallbackURL != "" || strings.Contains(got.CallbackHash, secret) {
		t.Errorf("a stored waitpoint shows its callback secret: %+v", got)
	}
	if _, err := f.waits.Callback(ctx, w.ID, strings.Repeat("0", 64), json.RawMessage(`1`)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Callback(wrong secret) error = %v, want errdefs.ErrNotFound", err)
	}
	if got, err := f.waits.Callback(ctx, w.ID, secret, json.RawMessage(`{"via":"callback"}`)); err != nil || string(got.Data) != `{"via":"callback"}` {
		t.Errorf("Callback(secret) = %s, %v", got.Data, err)
	}

	c := f.token(t, waitpoints.CreateRequest{})
	got, err := f.waits.Cancel(ctx, c.ID, "not needed")
	if err != nil || got.Status != waitpoints.StatusCanceled || got.Reason != "not needed" {
		t.Fatalf("Cancel() = %+v, %v", got, err)
	}
	if res := waitpoints.ResultOf(got); res.OK || !res.Canceled || res.Reason != "not needed" {
		t.Errorf("ResultOf(canceled) = %+v, want canceled with the reason", res)
	}
	if _, err := f.waits.Cancel(ctx, c.ID, "again"); err != nil {
		t.Errorf("Cancel(canceled) error = %v, want none", err)
	}
	if _, err := f.waits.Complete(ctx, c.ID, json.RawMessage(`1`)); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Complete(canceled) error = %v, want errdefs.ErrConflict", err)
	}
}

func TestExpire(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	tok := f.token(t, waitpoints.CreateRequest{TimeoutSeconds: 60})
	timer := f.token(t, waitpoints.CreateRequest{Kind: waitpoints.KindTimer, TimeoutSeconds: 30})
	forever := f.token(t, waitpoints.CreateRequest{})
	f.now = f.now.Add(45 * time.Second)
	if n, err := f.waits.Expire(ctx); err != nil || n != 1 {
		t.Fatalf("Expire() at +45s = %d, %v; want the timer only", n, err)
	}
	f.now = f.now.Add(time.Minute)
	if n, err := f.waits.Expire(ctx); err != nil || n != 1 {
		t.Fatalf("Expire() at +105s = %d, %v; want the token", n, err)
	}
	want := map[string]waitpoints.Status{tok.ID: waitpoints.StatusTimedOut, timer.ID: waitpoints.StatusCompleted, forever.ID: waitpoints.StatusWaiting}
	for id, st := range want {
		if got, _ := f.waits.Get(ctx, id); got.Status != st {
			t.Errorf("waitpoint %s is %s, want %s", id, got.Status, st)
		}
	}
	if res := waitpoints.ResultOf(mustGet(t, f, tok.ID)); res.OK || !res.TimedOut {
		t.Errorf("ResultOf(timed out) = %+v", res)
	}
	if _, err := f.waits.Complete(ctx, tok.ID, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Complete(timed out) error = %v, want errdefs.ErrConflict", err)
	}
	// Await expires a due waitpoint itself, at once.
	soon := f.token(t, waitpoints.CreateRequest{TimeoutSeconds: 1})
	f.now = f.now.Add(2 * time.Second)
	got, err := f.waits.Await(ctx, soon.ID, 5*time.Second)
	if err != nil || got.Status != waitpoints.StatusTimedOut {
		t.Errorf("Await(due) = %s, %v; want TIMED_OUT", got.Status, err)
	}
}

func mustGet(t *testing.T, f *fixture, id string) waitpoints.Waitpoint {
	t.Helper()
	w, err := f.waits.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestRunWaitsForHuman(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	r := f.running(t)
	if _, err := f.waits.Approve(ctx, r.ID, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Approve(run not waiting) error = %v, want errdefs.ErrConflict", err)
	}
	h, err := f.waits.CreateForRun(ctx, r.ID, waitpoints.CreateRequest{Kind: waitpoints.KindHuman, DisplayText: "Ship it?",
		Schema: json.RawMessage(`{"type":"object","required":["ok"],"properties":{"ok":{"type":"boolean"}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.waits.BeginWait(ctx, r.ID, h.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.runs.Get(ctx, r.ID); got.Status != runs.StatusWaiting {
		t.Errorf("run is %s after BeginWait, want WAITING", got.Status)
	}
	evs, _ := f.runs.Events(ctx, r.ID, 0, 100)
	if !hasEvent(evs, "waiting for a human ("+h.ID+"): Ship it?") {
		t.Errorf("the run's events do not name the waitpoint and its display text: %s", dump(evs))
	}
	waited := make(chan waitpoints.Waitpoint)
	go func() {
		w, _ := f.waits.Await(context.Background(), h.ID, 10*time.Second)
		waited <- w
	}()
	for _, bad := range []string{`{"ok":"yes"}`, `{}`, `[true]`} {
		if _, err := f.waits.Approve(ctx, r.ID, json.RawMessage(bad)); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Approve(%s) error = %v, want errdefs.ErrInvalid (schema)", bad, err)
		}
	}
	if _, err := f.waits.Approve(ctx, r.ID, json.RawMessage(`{"ok":true}`)); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	select {
	case w := <-waited:
		if w.Status != waitpoints.StatusCompleted || string(w.Data) != `{"ok":true}` {
			t.Errorf("Await() = %s %s, want COMPLETED with the approval", w.Status, w.Data)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Await did not return after the approval")
	}
	if err := f.waits.EndWait(ctx, r.ID, h.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.runs.Get(ctx, r.ID); got.Status != runs.StatusRunning {
		t.Errorf("run is %s after EndWait, want RUNNING", got.Status)
	}
}

func TestRejectAndRunCancel(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	r := f.running(t)
	h, _ := f.waits.CreateForRun(ctx, r.ID, waitpoints.CreateRequest{Kind: waitpoints.KindHuman, DisplayText: "ok?"})
	if _, err := f.waits.BeginWait(ctx, r.ID, h.ID); err != nil {
		t.Fatal(err)
	}
	got, err := f.waits.Reject(ctx, r.ID, "")
	if res := waitpoints.ResultOf(got); err != nil || !res.Canceled || res.Reason != "rejected" {
		t.Errorf("Reject() = %+v, %v; want a canceled result, reason rejected", res, err)
	}
	// A run canceled while it waits ends its waitpoints.
	tok, _ := f.waits.CreateForRun(ctx, r.ID, waitpoints.CreateRequest{Kind: waitpoints.KindToken})
	if _, err := f.waits.BeginWait(ctx, r.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	if c, err := f.runs.Cancel(ctx, r.ID); err != nil || c.Status != runs.StatusCanceled {
		t.Fatalf("Cancel(waiting run) = %s, %v", c.Status, err)
	}
	if w := mustGet(t, f, tok.ID); w.Status != waitpoints.StatusCanceled {
		t.Errorf("the canceled run's token is %s, want CANCELED", w.Status)
	}
	if _, err := f.waits.CreateForRun(ctx, r.ID, waitpoints.CreateRequest{Kind: waitpoints.KindToken}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("CreateForRun(canceled run) error = %v, want errdefs.ErrConflict", err)
	}
}

func hasEvent(evs []runs.Event, msg string) bool {
	for _, e := range evs {
		var d runs.SystemData
		if e.Type == runs.EventSystem && json.Unmarshal(e.Data, &d) == nil && d.Message == msg {
			return true
		}
	}
	return false
}

func dump(evs []runs.Event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(string(e.Data) + "\n")
	}
	return b.String()
}

// TestRetryCancelsWaits: a run's attempt waiting for a human is given up
// (its worker lost) and retried: the abandoned wait is canceled, saying
// why, so that an approval reaches the next attempt's wait; another
// run's wait is left alone.
func TestRetryCancelsWaits(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	r := f.running(t)
	old := f.token(t, waitpoints.CreateRequest{Kind: waitpoints.KindHuman, RunID: r.ID, DisplayText: "ship?"})
	other := f.token(t, waitpoints.CreateRequest{Kind: waitpoints.KindHuman, RunID: "run_other", DisplayText: "ship?"})
	r.Attempt = 2 // as queued again
	if err := f.waits.CancelForRetry(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, _ := f.waits.Get(ctx, old.ID)
	if got.Status != waitpoints.StatusCanceled || !strings.Contains(got.Reason, "attempt 1 of the run was given up; attempt 2 waits anew") {
		t.Errorf("abandoned wait = %s %q, want CANCELED saying why", got.Status, got.Reason)
	}
	if got, _ := f.waits.Get(ctx, other.ID); got.Status != waitpoints.StatusWaiting {
		t.Errorf("another run's wait = %s, want WAITING", got.Status)
	}
}
