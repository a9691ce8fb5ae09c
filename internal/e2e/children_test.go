package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
)

// TestChildRuns is issue 18's child runs on the gVisor tier with parking
// and one slot: a parent that batchTriggerAndWaits three children is
// parked while it waits (its sandbox gone), its children run on the slot
// it freed (with one slot they could not otherwise), and it is restored
// with their typed results in order, its state intact. Cancelling a
// parent cancels its children.
func TestChildRuns(t *testing.T) {
	d := startDev(t, "gvisor", "HELMR_PARK_AFTER=1s", "HELMR_SLOTS=1", "HELMR_WARM=0", "HELMR_CHECKPOINT_ENCRYPTION_KEY="+newCheckpointKey(t))
	d.deploy("internal/e2e/testdata/children")
	// The children's queue is paused until the parent is parked, so that
	// the test sees it parked before they run.
	d.mustHelmr("queues", "pause", "squares", "--project", "children")

	p := d.trigger("children", "parent", `{"ns":[1,2,-3]}`)
	ck, sbx := d.parked(p.ID)
	v := d.waitWaiting(p.ID, 10*time.Second)
	if sbx == "" {
		t.Fatal("no sandbox id in the parent's events")
	}
	if procs := hostProcsWith(sbx); len(procs) > 0 {
		t.Errorf("processes of the parked parent's sandbox %s still run: %v", sbx, procs)
	}
	if len(v.Children) != 3 {
		t.Fatalf("the parked parent's children = %+v, want 3", v.Children)
	}
	show := d.mustHelmr("runs", "show", p.ID)
	for _, c := range v.Children {
		if c.TaskID != "square" || c.Status != runs.StatusQueued {
			t.Errorf("child %+v, want a QUEUED run of square", c)
		}
		if !strings.Contains(show, c.ID) {
			t.Errorf("helmr runs show %s does not list child %s:\n%s", p.ID, c.ID, show)
		}
	}
	if !strings.Contains(show, "children (3):") || !strings.Contains(show, "waiting on ") {
		t.Errorf("helmr runs show %s:\n%s\nwant its children and its wait", p.ID, show)
	}
	if cs := d.mustHelmr("runs", "show", v.Children[0].ID); !strings.Contains(cs, "parent") || !strings.Contains(cs, p.ID) {
		t.Errorf("helmr runs show of a child does not name its parent:\n%s", cs)
	}

	d.mustHelmr("queues", "resume", "squares", "--project", "children")
	final := d.waitDone(p.ID, 240*time.Second)
	msgs := systemMessages(d.events(p.ID))
	if final.Status != runs.StatusCompleted {
		t.Fatalf("parent = %s %+v, want COMPLETED; events:\n%s", final.Status, final.Error, msgs)
	}
	want := map[string]any{
		"results": []any{
			map[string]any{"id": v.Children[0].ID, "square": 1.0},
			map[string]any{"id": v.Children[1].ID, "square": 4.0},
			map[string]any{"id": v.Children[2].ID, "status": "FAILED", "name": "RangeError", "error": "RangeError: cannot square -3 here"},
		},
		"stateKept": true,
	}
	var got map[string]any
	if err := json.Unmarshal(final.Output, &got); err != nil || !equalJSON(got, want) {
		t.Errorf("parent output = %s (%v), want %v", final.Output, err, want)
	}
	for _, w := range []string{"triggered and waits for 3 child run(s)", "parked: checkpoint " + ck, "queued to restore from checkpoint " + ck, "sandbox restored from checkpoint " + ck} {
		if !strings.Contains(msgs, w) {
			t.Errorf("parent events lack %q:\n%s", w, msgs)
		}
	}
	for i, c := range v.Children {
		r, err := d.api.GetRun(t.Context(), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus := runs.StatusCompleted
		if i == 2 {
			wantStatus = runs.StatusFailed
		}
		if r.Status != wantStatus || r.ParentID != p.ID || r.RootID != p.ID {
			t.Errorf("child %d = %s parent %q root %q, want %s with parent and root %s", i, r.Status, r.ParentID, r.RootID, wantStatus, p.ID)
		}
	}

	t.Run("cancel cascades", func(t *testing.T) {
		d.mustHelmr("queues", "pause", "squares", "--project", "children")
		p := d.trigger("children", "parent", `{"ns":[5,6]}`)
		deadline := time.Now().Add(90 * time.Second)
		var kids []runs.ChildSummary
		for len(kids) < 2 {
			v, err := d.api.GetRunView(t.Context(), p.ID)
			if err != nil {
				t.Fatal(err)
			}
			if v.Status.Terminal() || time.Now().After(deadline) {
				t.Fatalf("parent %s %+v has %d children, want 2", v.Status, v.Error, len(v.Children))
			}
			kids = v.Children
			time.Sleep(100 * time.Millisecond)
		}
		d.mustHelmr("cancel", p.ID)
		d.mustHelmr("queues", "resume", "squares", "--project", "children")
		for _, c := range append(kids, runs.ChildSummary{ID: p.ID}) {
			r, err := d.api.GetRun(t.Context(), c.ID)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != runs.StatusCanceled {
				t.Errorf("run %s after its parent (or itself) was canceled = %s, want CANCELED", c.ID, r.Status)
			}
		}
	})
}

// parked waits until run id is parked and returns its checkpoint and the
// sandbox it ran in.
func (d *dev) parked(id string) (ck, sbx string) {
	d.t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		for _, ev := range d.events(id) {
			var sd runs.SystemData
			if ev.Type != runs.EventSystem || json.Unmarshal(ev.Data, &sd) != nil {
				continue
			}
			if s := sd.Attrs["sandbox"]; s != "" {
				sbx = s
			}
			if strings.HasPrefix(sd.Message, "parked: checkpoint ") {
				ck = sd.Attrs["checkpoint"]
			}
		}
		if ck != "" {
			return ck, sbx
		}
		cur, err := d.api.GetRun(d.t.Context(), id)
		if err != nil || cur.Status.Terminal() || time.Now().After(deadline) {
			d.t.Fatalf("run %s not parked: %s %+v (%v); events %s", id, cur.Status, cur.Error, err, systemMessages(d.events(id)))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// equalJSON compares decoded JSON values.
func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
