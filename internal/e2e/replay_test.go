package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
)

// TestBulkCancelAndReplay: runs of a paused queue stay queued; a bulk
// cancel by tag and status cancels exactly those (a dry run first lists
// them and changes nothing); after the queue resumes, a bulk replay of the
// canceled ones with an edited payload runs each again, linked to its
// original by replayOf, and helmr replay replays one run with new tags.
func TestBulkCancelAndReplay(t *testing.T) {
	d := startDev(t, "process")
	d.deploy("internal/e2e/testdata/replay")
	if out := d.mustHelmr("queues", "pause", "gate", "--project", "replay"); !strings.Contains(out, "paused") {
		t.Fatalf("queues pause = %q", out)
	}
	var batch []string
	for i := range 3 {
		r := d.runJSON("run", "echo", "--project", "replay", "--payload-json", fmt.Sprintf(`{"n": %d}`, i), "--tag", "batch_a", "--tag", "nightly")
		batch = append(batch, r.ID)
	}
	keep := d.runJSON("run", "echo", "--project", "replay", "--payload-json", `{"n": 7}`, "--tag", "keep")

	// A dry run lists the three and cancels nothing.
	out := d.mustHelmr("runs", "cancel", "--tag", "batch_a", "--status", "queued", "--dry-run", "--project", "replay")
	if !strings.Contains(out, "would cancel 3") || !strings.Contains(out, "dry run") {
		t.Errorf("runs cancel --dry-run printed:\n%s", out)
	}
	for _, id := range batch {
		if !strings.Contains(out, id) {
			t.Errorf("runs cancel --dry-run does not list %s:\n%s", id, out)
		}
	}
	for _, id := range append(slices.Clone(batch), keep.ID) {
		if r, err := d.api.GetRun(t.Context(), id); err != nil || r.Status != runs.StatusQueued {
			t.Fatalf("run %s of the paused queue = %s, %v; want QUEUED", id, r.Status, err)
		}
	}

	var canceled runs.BulkResult
	d.mustJSON(&canceled, "runs", "cancel", "--tag", "batch_a", "--status", "QUEUED", "--project", "replay", "--json")
	if canceled.Matched != 3 || canceled.Counts[runs.BulkCanceled] != 3 || canceled.More {
		t.Fatalf("runs cancel = %+v, want 3 canceled", canceled)
	}
	for _, id := range batch {
		if r, _ := d.api.GetRun(t.Context(), id); r.Status != runs.StatusCanceled {
			t.Errorf("run %s = %s after the bulk cancel, want CANCELED", id, r.Status)
		}
	}
	if r, _ := d.api.GetRun(t.Context(), keep.ID); r.Status != runs.StatusQueued {
		t.Errorf("run %s (tag keep) = %s: the bulk cancel's filter does not select it", keep.ID, r.Status)
	}

	d.mustHelmr("queues", "resume", "gate", "--project", "replay")
	out = d.mustHelmr("runs", "replay", "--tag", "batch_a", "--status", "CANCELED", "--payload-json", `{"n": 99, "edited": true}`, "--project", "replay")
	if !strings.Contains(out, "replayed 3") {
		t.Fatalf("runs replay printed:\n%s", out)
	}
	page, err := d.api.ListRuns(t.Context(), "replay", "dev", runs.Filter{Tag: "batch_a", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	replayed := map[string]bool{}
	for _, r := range page.Runs {
		if r.ReplayOf == "" {
			continue
		}
		done := d.waitDone(r.ID, 2*time.Minute)
		if done.Status != runs.StatusCompleted || string(done.Output) != `{"n":99,"edited":true}` ||
			!slices.Equal(done.Tags, []string{"batch_a", "nightly"}) || done.Queue != "gate" {
			t.Errorf("replay %s of %s = %s output %s tags %v queue %q %+v", r.ID, r.ReplayOf, done.Status, done.Output, done.Tags, done.Queue, done.Error)
		}
		replayed[done.ReplayOf] = true
	}
	for _, id := range batch {
		if !replayed[id] {
			t.Errorf("no replay of %s among %d runs tagged batch_a", id, len(page.Runs))
		}
	}

	// One run, with new tags and its own payload.
	if r := d.waitDone(keep.ID, 2*time.Minute); r.Status != runs.StatusCompleted {
		t.Fatalf("run %s = %s %+v after the queue resumed", keep.ID, r.Status, r.Error)
	}
	one := d.runJSON("replay", keep.ID, "--tag", "again", "--project", "replay")
	done := d.waitDone(one.ID, 2*time.Minute)
	if done.Status != runs.StatusCompleted || done.ReplayOf != keep.ID || string(done.Output) != `{"n":7}` || !slices.Equal(done.Tags, []string{"again"}) {
		t.Errorf("helmr replay %s = %s replayOf %q output %s tags %v", keep.ID, done.Status, done.ReplayOf, done.Output, done.Tags)
	}
}

// runJSON runs a CLI verb that prints a run (with --json) and returns it.
func (d *dev) runJSON(args ...string) runs.Run {
	d.t.Helper()
	var r runs.Run
	d.mustJSON(&r, append(args, "--json")...)
	return r
}

// mustJSON runs a CLI verb and decodes what it printed into v.
func (d *dev) mustJSON(v any, args ...string) {
	d.t.Helper()
	out := d.mustHelmr(args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		d.t.Fatalf("helmr %s printed %q: %v", strings.Join(args, " "), out, err)
	}
}
