package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/workspaces"
)

// TestWorkspaceSandbox makes a workspace from a named sandbox and checks
// that its operations' sandbox stays up between operations and stops once
// idle for HELMR_WORKSPACE_IDLE: a file in the sandbox's own /tmp (not the
// workspace) is there for the next operation while it is warm, and gone
// after the sandbox was stopped and a new one started.
func TestWorkspaceSandbox(t *testing.T) { forEachTier(t, testWorkspaceSandbox) }

func testWorkspaceSandbox(t *testing.T, tier string) {
	const idle = 2 * time.Second
	d := startDev(t, tier, "HELMR_WORKSPACE_IDLE="+idle.String())
	d.deploy("internal/e2e/testdata/workspace")

	var ws workspaces.Workspace
	if err := json.Unmarshal([]byte(d.mustHelmr("workspace", "create", "--sandbox", "notes", "--project", "workspace", "--json")), &ws); err != nil {
		t.Fatal(err)
	}
	if ws.Sandbox != "notes" || ws.TaskID != "notes" {
		t.Fatalf("workspace create --sandbox notes = %+v, want sandbox notes through task notes", ws)
	}
	if _, errOut, code := d.helmr("workspace", "create", "--sandbox", "nosuch", "--project", "workspace"); code == 0 || !strings.Contains(errOut, `no task deployed in workspace/dev references a sandbox named "nosuch"`) {
		t.Errorf("workspace create --sandbox nosuch = exit %d %q", code, errOut)
	}
	if _, errOut, code := d.helmr("workspace", "create", "notes", "--sandbox", "notes", "--project", "workspace"); code == 0 || !strings.Contains(errOut, "usage") {
		t.Errorf("workspace create with a task and a sandbox = exit %d %q, want the usage", code, errOut)
	}

	exec := func(cmd string) workspaces.ExecResult {
		t.Helper()
		res, err := d.api.Exec(t.Context(), ws.ID, workspaces.ExecRequest{Command: cmd})
		if err != nil {
			t.Fatalf("exec %q: %v", cmd, err)
		}
		return res
	}
	if res := exec("echo kept > kept.txt && touch /tmp/warm && test -e /tmp/warm"); res.ExitCode != 0 {
		t.Fatalf("first exec = %+v", res)
	}
	if res := exec("test -e /tmp/warm"); res.ExitCode != 0 {
		t.Fatalf("the next exec right after = exit %d, want the same warm sandbox (its /tmp/warm)", res.ExitCode)
	}
	// Idle longer than HELMR_WORKSPACE_IDLE: the sandbox is stopped, the
	// next operation starts a fresh one (a fresh /tmp) on the same files.
	deadline := time.Now().Add(time.Minute)
	for {
		time.Sleep(2 * idle)
		res := exec("test -e /tmp/warm; echo $?; cat kept.txt")
		if res.Stdout == "1\nkept\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after idling %s the sandbox still held /tmp/warm (exec printed %q), want it stopped and a fresh one started on the workspace", 2*idle, res.Stdout)
		}
	}

	// A run's own workspace records its task's sandbox.
	r := mustRun(t, d.mustHelmr("run", "notes", "--project", "workspace", "--payload-json", `{"line":"one"}`, "--json"))
	if r = d.waitDone(r.ID, 2*time.Minute); r.Status != runs.StatusCompleted {
		t.Fatalf("run = %s %+v", r.Status, r.Error)
	}
	if got, err := d.api.GetWorkspace(t.Context(), r.WorkspaceID); err != nil || got.Sandbox != "notes" {
		t.Errorf("the run's workspace = %+v, %v; want sandbox notes", got, err)
	}
}
