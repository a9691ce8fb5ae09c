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

// TestWritableRoot: through a real helmr dev, a workspace's sandbox and a
// run's have a writable root bounded by the sandbox's declared rootSize,
// else by HELMR_ROOT_SIZE: a harness's writes outside the workspace
// succeed, a write past the bound gets ENOSPC, and a run's root starts
// from the image each time.
func TestWritableRoot(t *testing.T) { forEachTier(t, testWritableRoot) }

func testWritableRoot(t *testing.T, tier string) {
	d := startDev(t, tier, "HELMR_ROOT_SIZE=96Mi")
	d.deploy("internal/e2e/testdata/workspace")

	create := func(sb string) workspaces.Workspace {
		t.Helper()
		var ws workspaces.Workspace
		out := d.mustHelmr("workspace", "create", "--sandbox", sb, "--project", "workspace", "--json")
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
	// rootKiB is the size of the sandbox's root filesystem, as df tells.
	rootKiB := func(ws workspaces.Workspace) int64 {
		t.Helper()
		res := exec(ws, "df -k / | tail -1 | awk '{print $2}'")
		n, err := strconv.ParseInt(strings.TrimSpace(res.Stdout), 10, 64)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("df / in %s = %+v", ws.ID, res)
		}
		return n
	}

	notes, rooted := create("notes"), create("rooted")
	if res := exec(notes, "mkdir /myrepo && echo hi > /myrepo/README && echo '{}' > /root/state.json && cat /myrepo/README"); res.ExitCode != 0 || res.Stdout != "hi\n" {
		t.Fatalf("root writes in a workspace's sandbox = %+v, want them to succeed", res)
	}
	if res := exec(notes, "cat /root/state.json"); res.ExitCode != 0 || res.Stdout != "{}\n" {
		t.Errorf("the next operation in the same sandbox = %+v, want /root/state.json still there", res)
	}
	for _, c := range []struct {
		ws   workspaces.Workspace
		want int64
	}{{notes, 96 << 10}, {rooted, 48 << 10}} {
		if got := rootKiB(c.ws); got < c.want*9/10 || got > c.want {
			t.Errorf("root of %s's sandbox is %d KiB, want about %d (HELMR_ROOT_SIZE=96Mi, rootSize 48Mi)", c.ws.Sandbox, got, c.want)
		}
	}
	res := exec(rooted, "dd if=/dev/zero of=/fill bs=1M count=64 2>&1; echo exit=$?")
	if !strings.Contains(res.Stdout, "No space left on device") || !strings.Contains(res.Stdout, "exit=1") {
		t.Errorf("writing 64 MiB to a 48Mi root = %q, want ENOSPC", res.Stdout)
	}

	for i := 0; i < 2; i++ {
		r := mustRun(t, d.mustHelmr("run", "rooted", "--project", "workspace", "--json"))
		if r = d.waitDone(r.ID, 2*time.Minute); r.Status != runs.StatusCompleted || string(r.Output) != `{"before":false}` {
			t.Errorf("run %d = %s %s %+v, want completed with {\"before\":false} (a fresh root each run)", i, r.Status, r.Output, r.Error)
		}
	}
}
