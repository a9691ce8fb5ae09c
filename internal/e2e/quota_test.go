package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/workspaces"
)

// TestWorkspaceOwnQuota gives workspaces quotas of their own on a worker
// whose default is none (HELMR_WORKSPACE_QUOTA=0): a 16Mi workspace's
// files sit on a 16 MiB filesystem, made for its first direct operation
// or for its first run alike, and a write past it fails with ENOSPC,
// while a workspace without one is a plain directory. Bad quotas are
// refused at create.
func TestWorkspaceOwnQuota(t *testing.T) { forEachTier(t, testWorkspaceOwnQuota) }

func testWorkspaceOwnQuota(t *testing.T, tier string) {
	d := startDev(t, tier, "HELMR_WORKSPACE_QUOTA=0")
	d.deploy("internal/e2e/testdata/workspace")

	create := func(args ...string) workspaces.Workspace {
		t.Helper()
		var ws workspaces.Workspace
		out := d.mustHelmr(append([]string{"workspace", "create", "--project", "workspace", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &ws); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	exec := func(ws workspaces.Workspace, cmd string) workspaces.ExecResult {
		t.Helper()
		res, err := d.api.Exec(t.Context(), ws.ID, workspaces.ExecRequest{Command: cmd})
		if err != nil {
			t.Fatalf("exec %q in %s: %v", cmd, ws.ID, err)
		}
		return res
	}
	// sizeKiB is the size of the filesystem holding ws's files, as df
	// inside its sandbox tells.
	sizeKiB := func(ws workspaces.Workspace) int64 {
		t.Helper()
		res := exec(ws, "df -k . | tail -1 | awk '{print $2}'")
		n, err := strconv.ParseInt(strings.TrimSpace(res.Stdout), 10, 64)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("df in %s = %+v", ws.ID, res)
		}
		return n
	}

	small := create("--quota", "16Mi", "--sandbox", "notes")
	if small.QuotaBytes != 16<<20 {
		t.Fatalf("workspace create --quota 16Mi = quotaBytes %d, want %d", small.QuotaBytes, 16<<20)
	}
	if got, err := d.api.GetWorkspace(t.Context(), small.ID); err != nil || got.QuotaBytes != 16<<20 {
		t.Errorf("GetWorkspace = %+v, %v; want its quota kept", got, err)
	}
	if n := sizeKiB(small); n > 16<<10 || n < 8<<10 {
		t.Errorf("a 16Mi workspace's filesystem is %d KiB, want at most 16 MiB (and not much less)", n)
	}
	res := exec(small, "dd if=/dev/zero of=big bs=1M count=32 2>&1; echo rc=$?")
	if !strings.Contains(res.Stdout, "No space left on device") || strings.Contains(res.Stdout, "rc=0") {
		t.Errorf("writing 32 MiB into a 16Mi workspace printed %q, want ENOSPC", res.Stdout)
	}
	if res := exec(small, "rm big && echo still > usable.txt && cat usable.txt"); res.Stdout != "still\n" {
		t.Errorf("after freeing the space: %+v, want the workspace usable again", res)
	}

	plain := create("notes")
	if plain.QuotaBytes != 0 {
		t.Errorf("a workspace without --quota has quotaBytes %d, want 0 (the worker's)", plain.QuotaBytes)
	}
	if n := sizeKiB(plain); n <= 16<<10 {
		t.Errorf("a workspace without a quota on a worker without one is on a %d KiB filesystem, want the host's (a plain directory)", n)
	}

	// A run is the first to use the next one: its sandbox gets a fresh
	// 32Mi disk (not one booted ahead at the worker's default).
	byRun := create("--quota", "32Mi", "notes")
	r := mustRun(t, d.mustHelmr("run", "notes", "--project", "workspace", "--workspace", byRun.ID, "--payload-json", `{"line":"one"}`, "--json"))
	if r = d.waitDone(r.ID, 2*time.Minute); r.Status != runs.StatusCompleted {
		t.Fatalf("run = %s %+v", r.Status, r.Error)
	}
	if n := sizeKiB(byRun); n > 32<<10 || n < 24<<10 {
		t.Errorf("a 32Mi workspace first used by a run is on a %d KiB filesystem, want about 32 MiB", n)
	}
	if res := exec(byRun, "cat notes.txt"); res.Stdout != "one\n" {
		t.Errorf("the run's notes = %q, want one", res.Stdout)
	}

	// A sandbox that declares resources({disk: "24Mi"}): the workspaces
	// made for it, by its runs or by workspace create, have that quota
	// (unless --quota says otherwise), and its runs take sandboxes booted
	// ahead with a disk of that size.
	sizedRun := func() runs.Run {
		t.Helper()
		r := mustRun(t, d.mustHelmr("run", "sized", "--project", "workspace", "--payload-json", `{"line":"s"}`, "--json"))
		if r = d.waitDone(r.ID, 2*time.Minute); r.Status != runs.StatusCompleted {
			t.Fatalf("run sized = %s %+v", r.Status, r.Error)
		}
		return r
	}
	first := sizedRun()
	ws, err := d.api.GetWorkspace(t.Context(), first.WorkspaceID)
	if err != nil || ws.QuotaBytes != 24<<20 {
		t.Errorf("the workspace of a run of a 24Mi sandbox = %+v, %v; want quotaBytes %d", ws, err, 24<<20)
	}
	if n := sizeKiB(ws); n > 24<<10 || n < 16<<10 {
		t.Errorf("the workspace of a run of a 24Mi sandbox is on a %d KiB filesystem, want about 24 MiB", n)
	}
	var warm bool
	for range 20 { // the sandbox booted ahead may still be booting
		second := sizedRun()
		if hasWarmStart(d.events(second.ID)) {
			warm = true
			ws, _ := d.api.GetWorkspace(t.Context(), second.WorkspaceID)
			if n := sizeKiB(ws); n > 24<<10 || n < 16<<10 {
				t.Errorf("a run of a 24Mi sandbox in a sandbox booted ahead has a %d KiB workspace, want about 24 MiB", n)
			}
			break
		}
	}
	if !warm {
		t.Errorf("no run of the 24Mi sandbox took a sandbox booted ahead")
	}
	if ws := create("sized"); ws.QuotaBytes != 24<<20 {
		t.Errorf("workspace create sized = quotaBytes %d, want the sandbox's 24Mi", ws.QuotaBytes)
	}
	if ws := create("--quota", "12Mi", "--sandbox", "sized"); ws.QuotaBytes != 12<<20 {
		t.Errorf("workspace create --quota 12Mi --sandbox sized = quotaBytes %d, want 12Mi", ws.QuotaBytes)
	}

	for _, bad := range []struct{ quota, want string }{
		{"1Mi", "a workspace's size quota is from 8Mi to 16Ti"},
		{"20Ti", "a workspace's size quota is from 8Mi to 16Ti"},
		{"lots", `quota "lots": want a byte count`},
		{"-5", `quota "-5": want a byte count`},
	} {
		if _, errOut, code := d.helmr("workspace", "create", "--project", "workspace", "--quota", bad.quota, "notes"); code == 0 || !strings.Contains(errOut, bad.want) {
			t.Errorf("workspace create --quota %s = exit %d %q, want %q", bad.quota, code, errOut, bad.want)
		}
	}
	if out := d.mustHelmr("workspace", "list", "--project", "workspace"); !strings.Contains(out, "QUOTA") || !strings.Contains(out, " 16Mi ") ||
		!strings.Contains(out, " 24Mi ") || !strings.Contains(out, " worker's ") {
		t.Errorf("workspace list:\n%s\nwant a QUOTA column with 16Mi, 24Mi and the worker's", out)
	}
	list, err := d.api.ListWorkspaces(t.Context(), "workspace", "dev")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range list {
		if w.QuotaBytes != 0 && w.QuotaBytes != 12<<20 && w.QuotaBytes != 16<<20 && w.QuotaBytes != 24<<20 && w.QuotaBytes != 32<<20 {
			t.Errorf("workspace %s has quotaBytes %d: a refused quota was stored", w.ID, w.QuotaBytes)
		}
	}
}

// hasWarmStart reports whether a run's sandbox was one booted ahead.
func hasWarmStart(evs []runs.Event) bool {
	for _, ev := range evs {
		var s runs.SystemData
		if ev.Type == runs.EventSystem && json.Unmarshal(ev.Data, &s) == nil && s.Attrs["warm"] == "true" {
			return true
		}
	}
	return false
}
