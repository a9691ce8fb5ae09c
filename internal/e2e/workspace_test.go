package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/workspaces"
)

// TestWorkspaces attaches runs to workspaces: a run's workspace is kept
// under its ID, the next run attached to it finds what the last one wrote,
// also after helmr dev (its worker) restarts; a run without --workspace
// gets a new one; a workspace serves one run at a time; a deleted one takes
// no more runs and its worker removes its files.
func TestWorkspaces(t *testing.T) { forEachTier(t, testWorkspaces) }

func testWorkspaces(t *testing.T, tier string) {
	d := startDev(t, tier)
	d.deploy("internal/e2e/testdata/workspace")
	run := func(payload string, flags ...string) runs.Run {
		t.Helper()
		out := d.mustHelmr(append([]string{"run", "notes", "--project", "workspace", "--payload-json", payload, "--json"}, flags...)...)
		r := mustRun(t, out)
		return d.waitDone(r.ID, 2*time.Minute)
	}
	want := func(r runs.Run, output string) {
		t.Helper()
		if r.Status != runs.StatusCompleted || string(r.Output) != output {
			t.Fatalf("run %s = %s %s %+v, want COMPLETED %s", r.ID, r.Status, r.Output, r.Error, output)
		}
	}
	r1 := run(`{"line":"one"}`)
	want(r1, `""`)
	ws := r1.WorkspaceID
	if !strings.HasPrefix(ws, workspaces.Prefix) {
		t.Fatalf("run workspace = %q, want a new ws_…", ws)
	}
	want(run(`{"line":"two"}`, "--workspace", ws), `"one\n"`)
	fresh := run(`{"line":"elsewhere"}`)
	want(fresh, `""`)
	if fresh.WorkspaceID == ws || fresh.WorkspaceID == "" {
		t.Errorf("a run without --workspace got %q, want a new workspace", fresh.WorkspaceID)
	}
	got, err := d.api.GetWorkspace(context.Background(), ws)
	if err != nil || got.Host == "" || got.LastRunID == "" || got.Project != "workspace" || got.TaskID != "notes" {
		t.Errorf("workspace %s = %+v, %v; want its worker and last run", ws, got, err)
	}
	if out := d.mustHelmr("workspace", "list", "--project", "workspace"); !strings.Contains(out, ws) || !strings.Contains(out, fresh.WorkspaceID) {
		t.Errorf("helmr workspace list:\n%s\nwant both workspaces", out)
	}

	// A new worker (helmr dev restarted on the same data dir) finds it.
	d.restart()
	want(run(`{"line":"three"}`, "--workspace", ws), `"one\ntwo\n"`)

	// One run at a time.
	holder := mustRun(t, d.mustHelmr("run", "notes", "--project", "workspace", "--payload-json", `{"line":"four","sleepMs":4000}`, "--workspace", ws, "--json"))
	if _, errOut, code := d.helmr("run", "notes", "--project", "workspace", "--payload-json", `{"line":"x"}`, "--workspace", ws); code == 0 || !strings.Contains(errOut, "in use by run "+holder.ID) {
		t.Errorf("a second run on a held workspace = exit %d %q, want a conflict naming %s", code, errOut, holder.ID)
	}
	if _, errOut, code := d.helmr("workspace", "delete", ws); code == 0 || !strings.Contains(errOut, "in use by run") {
		t.Errorf("deleting a held workspace = exit %d %q, want a conflict", code, errOut)
	}
	want(d.waitDone(holder.ID, 2*time.Minute), `"one\ntwo\nthree\n"`)
	if _, errOut, code := d.helmr("run", "notes", "--project", "workspace", "--workspace", "ws_nosuch"); code == 0 || !strings.Contains(errOut, `workspace "ws_nosuch"`) {
		t.Errorf("an unknown workspace = exit %d %q", code, errOut)
	}

	// Deleted: no more runs; the worker removes its files (at its next start).
	d.mustHelmr("workspace", "delete", ws)
	if _, errOut, code := d.helmr("run", "notes", "--project", "workspace", "--workspace", ws); code == 0 || !strings.Contains(errOut, "was deleted") {
		t.Errorf("a run on a deleted workspace = exit %d %q", code, errOut)
	}
	if out := d.mustHelmr("workspace", "list", "--project", "workspace"); strings.Contains(out, ws) {
		t.Errorf("helmr workspace list after the delete still lists %s:\n%s", ws, out)
	}
	d.restart()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, errImg := os.Stat(filepath.Join(d.dataDir, "workspaces", ws+".img"))
		_, errDir := os.Stat(filepath.Join(d.dataDir, "workspaces", ws))
		if errors.Is(errImg, os.ErrNotExist) && errors.Is(errDir, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted workspace's files are still there (%v, %v)", errImg, errDir)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := workspaceFile(t, d.dataDir, fresh.WorkspaceID, "notes.txt"); err != nil {
		t.Errorf("the other workspace's files: %v", err)
	}
}

// mustRun reads the run `helmr run --json` printed.
func mustRun(t *testing.T, out string) runs.Run {
	t.Helper()
	var r runs.Run
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("helmr run --json printed %q: %v", out, err)
	}
	return r
}
