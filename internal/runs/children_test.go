package runs_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
	"github.com/helmr/helmr/internal/waitpoints"
	"github.com/helmr/helmr/internal/workers"
)

type family struct {
	runs  *runs.Service
	waits *waitpoints.Service
}

func newFamily(t *testing.T) *family {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "helmr.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &family{runs: runs.NewService(st, st, st, runs.NewBroker(), slog.New(slog.DiscardHandler))}
	f.waits = waitpoints.NewService(st, f.runs, slog.New(slog.DiscardHandler))
	f.runs.ChildWaits = f.waits
	f.runs.Ended = func(ctx context.Context, r runs.Run) {
		if err := f.waits.CancelForRun(ctx, r); err != nil {
			t.Errorf("CancelForRun(%s): %v", r.ID, err)
		}
	}
	if _, err := st.CreateDeployment(t.Context(), deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{goodTask("parent"), goodTask("child")}},
		Files:    map[string][]byte{"bundles/tasks/a.mjs": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	return f
}

// start leases every queued run and starts it.
func (f *family) start(t *testing.T) {
	t.Helper()
	for {
		r, err := f.runs.Lease(t.Context(), "w", workers.Capabilities{CPUs: 4, MemoryBytes: 1 << 32})
		if errors.Is(err, errdefs.ErrNotFound) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.runs.Started(t.Context(), r.ID, "w", "process", runs.SystemData{Message: "started"}); err != nil {
			t.Fatal(err)
		}
	}
}

// parent is a RUNNING run of task parent.
func (f *family) parent(t *testing.T) runs.Run {
	t.Helper()
	r, _, err := f.runs.Trigger(t.Context(), runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	f.start(t)
	return r
}

func items(n int, key string) []runs.ChildItem {
	out := make([]runs.ChildItem, n)
	for i := range out {
		out[i] = runs.ChildItem{TaskID: "child", Payload: json.RawMessage(`{"i":` + string(rune('0'+i)) + `}`)}
		if key != "" {
			out[i].Options.IdempotencyKey = key + string(rune('0'+i))
		}
	}
	return out
}

func (f *family) status(t *testing.T, id string) runs.Status {
	t.Helper()
	r, err := f.runs.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

// TestBatchTriggerAndWait: a parent's wait for three children completes,
// with their results in the batch's order, when the last one ends; the
// children name their parent and root, and the parent lists them.
func TestBatchTriggerAndWait(t *testing.T) {
	f := newFamily(t)
	ctx := t.Context()
	p := f.parent(t)
	res, err := f.runs.TriggerChildren(ctx, p.ID, runs.ChildrenRequest{Items: items(3, ""), Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 3 || res.WaitpointID == "" {
		t.Fatalf("TriggerChildren = %+v, want 3 runs and a waitpoint", res)
	}
	for i, c := range res.Runs {
		r, err := f.runs.Get(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Created || r.ParentID != p.ID || r.RootID != p.ID || r.TaskID != "child" || r.Status != runs.StatusQueued {
			t.Errorf("child %d = %+v (created %v), want a QUEUED run of child with parent and root %s", i, r, c.Created, p.ID)
		}
	}
	f.start(t)
	// Finished out of order: the second fails, the third completes, then
	// the first.
	outcomes := []runs.Outcome{
		{Status: runs.StatusCompleted, Output: json.RawMessage(`{"n":0}`)},
		{Status: runs.StatusFailed, Error: &runs.Error{Class: runs.ClassTaskProcess, Name: "Error", Message: "boom"}},
		{Status: runs.StatusCompleted, Output: json.RawMessage(`2`)},
	}
	for _, i := range []int{1, 2, 0} {
		wp, err := f.waits.Get(ctx, res.WaitpointID)
		if err != nil || wp.Status != waitpoints.StatusWaiting {
			t.Fatalf("waitpoint before child %d ended = %s (%v), want WAITING", i, wp.Status, err)
		}
		if _, err := f.runs.Finish(ctx, res.Runs[i].ID, outcomes[i]); err != nil {
			t.Fatal(err)
		}
	}
	wp, err := f.waits.Get(ctx, res.WaitpointID)
	if err != nil {
		t.Fatal(err)
	}
	if wp.Status != waitpoints.StatusCompleted || wp.Kind != waitpoints.KindRuns || wp.RunID != p.ID {
		t.Fatalf("waitpoint = %s %s of %s, want a COMPLETED runs waitpoint of %s", wp.Status, wp.Kind, wp.RunID, p.ID)
	}
	var got []runs.ChildResult
	if err := json.Unmarshal(wp.Data, &got); err != nil {
		t.Fatal(err)
	}
	want := []runs.ChildResult{
		{OK: true, ID: res.Runs[0].ID, TaskID: "child", Status: runs.StatusCompleted, Output: json.RawMessage(`{"n":0}`)},
		{OK: false, ID: res.Runs[1].ID, TaskID: "child", Status: runs.StatusFailed, Error: outcomes[1].Error},
		{OK: true, ID: res.Runs[2].ID, TaskID: "child", Status: runs.StatusCompleted, Output: json.RawMessage(`2`)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	kids, err := f.runs.Children(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range kids {
		ids = append(ids, k.ID)
	}
	if diff := cmp.Diff([]string{res.Runs[0].ID, res.Runs[1].ID, res.Runs[2].ID}, ids); diff != "" {
		t.Errorf("Children (-want +got):\n%s", diff)
	}
	// A grandchild's root is the first run of the tree.
	g, err := f.runs.TriggerChildren(ctx, res.Runs[2].ID, runs.ChildrenRequest{Items: items(1, "")})
	if err == nil {
		t.Fatalf("a finished run triggered child %+v", g)
	}
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("TriggerChildren(finished run) = %v, want a conflict", err)
	}
}

// TestChildIdempotency: a repeat of the parent's call (its next attempt)
// gets the same children and the same waitpoint, resolved already when
// they have ended.
func TestChildIdempotency(t *testing.T) {
	f := newFamily(t)
	ctx := t.Context()
	p := f.parent(t)
	first, err := f.runs.TriggerChildren(ctx, p.ID, runs.ChildrenRequest{Items: items(2, "k"), Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	f.start(t)
	for _, c := range first.Runs {
		if _, err := f.runs.Finish(ctx, c.ID, runs.Outcome{Status: runs.StatusCompleted, Output: json.RawMessage(`true`)}); err != nil {
			t.Fatal(err)
		}
	}
	again, err := f.runs.TriggerChildren(ctx, p.ID, runs.ChildrenRequest{Items: items(2, "k"), Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if again.WaitpointID != first.WaitpointID {
		t.Errorf("repeat waits on %s, want the first waitpoint %s", again.WaitpointID, first.WaitpointID)
	}
	for i := range again.Runs {
		if again.Runs[i].ID != first.Runs[i].ID || again.Runs[i].Created {
			t.Errorf("repeat child %d = %+v, want %s again, not created", i, again.Runs[i], first.Runs[i].ID)
		}
	}
	if wp, _ := f.waits.Get(ctx, again.WaitpointID); wp.Status != waitpoints.StatusCompleted {
		t.Errorf("repeat's waitpoint = %s, want COMPLETED", wp.Status)
	}
	// The key is the parent's: another parent gets a new child.
	other := f.parent(t)
	res, err := f.runs.TriggerChildren(ctx, other.ID, runs.ChildrenRequest{Items: items(1, "k")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Runs[0].ID == first.Runs[0].ID || !res.Runs[0].Created {
		t.Errorf("another parent's child with the same key = %+v, want a new run", res.Runs[0])
	}
	// A child that ended before the wait was made completes it at once.
	quick, err := f.runs.TriggerChildren(ctx, p.ID, runs.ChildrenRequest{Items: items(1, "q")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.runs.Cancel(ctx, quick.Runs[0].ID); err != nil {
		t.Fatal(err)
	}
	waited, err := f.runs.TriggerChildren(ctx, p.ID, runs.ChildrenRequest{Items: items(1, "q"), Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	wp, _ := f.waits.Get(ctx, waited.WaitpointID)
	if wp.Status != waitpoints.StatusCompleted || !strings.Contains(string(wp.Data), `"status":"CANCELED"`) {
		t.Errorf("wait for a child that had ended = %s %s, want COMPLETED with its CANCELED result", wp.Status, wp.Data)
	}
}

// TestCancelCascades: cancelling a run cancels its unfinished children
// and theirs; a finished child stays as it ended.
func TestCancelCascades(t *testing.T) {
	f := newFamily(t)
	ctx := t.Context()
	p := f.parent(t)
	kids, err := f.runs.TriggerChildren(ctx, p.ID, runs.ChildrenRequest{Items: items(3, "")})
	if err != nil {
		t.Fatal(err)
	}
	f.start(t)
	done, running, queued := kids.Runs[0].ID, kids.Runs[1].ID, kids.Runs[2].ID
	if _, err := f.runs.Finish(ctx, done, runs.Outcome{Status: runs.StatusCompleted}); err != nil {
		t.Fatal(err)
	}
	grand, err := f.runs.TriggerChildren(ctx, running, runs.ChildrenRequest{Items: items(1, ""), Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	g, _ := f.runs.Get(ctx, grand.Runs[0].ID)
	if g.RootID != p.ID || g.ParentID != running {
		t.Errorf("grandchild parent %s root %s, want %s and %s", g.ParentID, g.RootID, running, p.ID)
	}
	if _, err := f.runs.Cancel(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]runs.Status{p.ID: runs.StatusCanceled, done: runs.StatusCompleted, running: runs.StatusCanceled,
		queued: runs.StatusCanceled, g.ID: runs.StatusCanceled} {
		if got := f.status(t, id); got != want {
			t.Errorf("run %s = %s after its root was canceled, want %s", id, got, want)
		}
	}
}

// TestTriggerChildrenRefuses: bad requests name what is wrong, and a batch
// with a bad item leaves no child behind.
func TestTriggerChildrenRefuses(t *testing.T) {
	f := newFamily(t)
	ctx := t.Context()
	p := f.parent(t)
	bad := items(2, "")
	bad[1].TaskID = "nope"
	if _, err := f.runs.TriggerChildren(ctx, p.ID, runs.ChildrenRequest{Items: bad, Wait: true}); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `item 1 (task "nope")`) {
		t.Errorf("batch with an unknown task = %v, want not found naming item 1", err)
	}
	kids, _ := f.runs.Children(ctx, p.ID)
	if len(kids) != 1 || kids[0].Status != runs.StatusCanceled {
		t.Errorf("children after a failed batch = %+v, want the one made canceled", kids)
	}
	for _, tc := range []struct {
		name string
		req  runs.ChildrenRequest
		want string
	}{
		{"empty", runs.ChildrenRequest{}, "no runs"},
		{"too many", runs.ChildrenRequest{Items: make([]runs.ChildItem, runs.MaxBatch+1)}, "at most 500"},
		{"bad delay", runs.ChildrenRequest{Items: []runs.ChildItem{{TaskID: "child", Options: runs.ChildOptions{Delay: "soon"}}}}, `delay "soon"`},
		{"bad payload", runs.ChildrenRequest{Items: []runs.ChildItem{{TaskID: "child", Payload: json.RawMessage(`{`)}}}, "not valid JSON"},
		{"long key", runs.ChildrenRequest{Items: []runs.ChildItem{{TaskID: "child", Options: runs.ChildOptions{IdempotencyKey: strings.Repeat("k", 201)}}}}, "longer than 200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.runs.TriggerChildren(ctx, p.ID, tc.req)
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("TriggerChildren = %v, want invalid naming %q", err, tc.want)
			}
		})
	}
}
