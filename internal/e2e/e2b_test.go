package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/testenv"
	"github.com/helmr/helmr/internal/workspaces"
)

// e2bPausePhases is driven by the published E2B Python SDK in two phases:
// "pause" creates a sandbox, starts a counter whose value lives only in
// its process's memory, and pauses the sandbox; "resume" connects (the
// resume), and finds the process running and its counter going on. It
// prints one JSON object.
const e2bPausePhases = `
import json, sys, time
from e2b import Sandbox

def count(s):
    for _ in range(300):
        out = s.commands.run("cat /tmp/count 2>/dev/null || true").stdout.split()
        if len(out) == 2:
            return out[0], int(out[1])
        time.sleep(0.2)
    raise SystemExit("the counter never counted")

if sys.argv[1] == "pause":
    sbx = Sandbox.create(template="notes", timeout=600)
    sbx.files.write("counter.py", "import random, time\nv = random.randrange(10**9)\nn = 0\nwhile True:\n    n += 1\n    open('/tmp/count', 'w').write(f'{v} {n}')\n    time.sleep(0.2)\n")
    bg = sbx.commands.run("python3 counter.py", background=True)
    value, n = count(sbx)
    while n < 3:
        value, n = count(sbx)
    assert sbx.pause()
    print(json.dumps({"id": sbx.sandbox_id, "pid": bg.pid, "value": value, "n": n, "state": str(Sandbox.get_info(sbx.sandbox_id).state.value)}))
else:
    sbx = Sandbox.connect(sys.argv[2])
    pids = [p.pid for p in sbx.commands.list()]
    time.sleep(1)
    value, n = count(sbx)
    print(json.dumps({"pids": pids, "value": value, "n": n, "state": str(sbx.get_info().state.value)}))
    sbx.kill()
`

// TestE2BResumeOnAnotherWorker pauses an E2B sandbox holding a running
// process on one worker, stops that worker, and resumes the sandbox with
// the published Python SDK: another worker restores the checkpoint, with
// the process running and its in-memory counter going on from where it
// was. On each tier that checkpoints: gVisor, and a microVM, whose
// workspace is a disk image of the guest's.
func TestE2BResumeOnAnotherWorker(t *testing.T) {
	for _, tier := range []string{"gvisor", "microvm"} {
		t.Run(tier, func(t *testing.T) { testE2BResumeOnAnotherWorker(t, tier) })
	}
}

func testE2BResumeOnAnotherWorker(t *testing.T, tier string) {
	testenv.RequireRoot(t)
	testenv.BaseRootfs(t)
	py := os.Getenv("HELMR_E2B_PYTHON")
	testenv.Require(t, py != "", "the test drives the published E2B Python SDK: eval \"$(scripts/e2b-sdk.sh)\" sets HELMR_E2B_PYTHON")
	requireTier(t, tier) // pausing checkpoints the sandbox
	bin := testenv.Binaries(t)
	tmp := t.TempDir()
	base := append(environ(t), "HELMR_CACHE_DIR="+testenv.CacheDir(), "HELMR_PROFILE="+filepath.Join(tmp, "profile.json"),
		"HELMR_WORKER_TOKEN=", "HELMR_PROJECT=", "HELMR_OWNER_TOKEN="+ownerToken, "HELMR_API_KEY="+ownerToken, "HELMR_STATE_DIR="+testenv.StateRoot(t))
	server := start(t, bin, append(slices.Clip(base), "HELMR_DATA_DIR="+filepath.Join(tmp, "cp"), "HELMR_ADDR=127.0.0.1:0"),
		"Helmr control plane at ", "server")
	d := &dev{t: t, bin: bin, env: append(slices.Clip(base), "HELMR_URL="+server), url: server, api: client.New(server, ownerToken), token: ownerToken}
	cred := strings.TrimSpace(d.mustHelmr("apikey", "create", "--worker", "--name", "pause"))
	key := newCheckpointKey(t)
	worker := func(name string) func() {
		_, stop := startStoppable(t, bin, append(slices.Clip(base), "HELMR_DATA_DIR="+filepath.Join(tmp, name), "HELMR_WORKER_TOKEN="+cred,
			"HELMR_RUNTIME="+tier, "HELMR_WARM=0", "HELMR_CHECKPOINT_ENCRYPTION_KEY="+key),
			"Helmr worker leasing runs from ", "worker", "--control-url", server)
		return stop
	}
	stopA := worker("a")
	d.deploy("internal/e2e/testdata/workspace")
	e2bKey := strings.TrimSpace(d.mustHelmr("apikey", "create", "--e2b", "--project", "workspace", "--env", "dev",
		"--grant", "workspaces:read,workspaces:manage,workspaces:exec", "--name", "e2b"))
	phase := func(args ...string) map[string]any {
		t.Helper()
		cmd := exec.Command(py, append([]string{"-c", e2bPausePhases}, args...)...)
		cmd.Env = append(os.Environ(), "E2B_API_URL="+server+"/e2b", "E2B_SANDBOX_URL="+server+"/e2b", "E2B_API_KEY="+e2bKey)
		out, err := cmd.Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("e2b %s: %v\n%s%s", args[0], err, out, stderr)
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("e2b %s printed %q: %v", args[0], out, err)
		}
		return got
	}
	paused := phase("pause")
	if paused["state"] != "paused" {
		t.Fatalf("after pause the sandbox is %v, want paused", paused["state"])
	}
	id := paused["id"].(string)
	stopA() // the sandbox can only come back on the other worker
	worker("b")
	resumed := phase("resume", id)
	if resumed["state"] != "running" {
		t.Errorf("after connect the sandbox is %v, want running", resumed["state"])
	}
	if pids, _ := resumed["pids"].([]any); !slices.Contains(pids, paused["pid"]) {
		t.Errorf("resumed processes %v lack the running one, %v", resumed["pids"], paused["pid"])
	}
	if resumed["value"] != paused["value"] || resumed["n"].(float64) <= paused["n"].(float64) {
		t.Errorf("counter after resume = %v %v, want %v counting on from %v: the process lost its memory", resumed["value"], resumed["n"], paused["value"], paused["n"])
	}
	// The trajectory says where it was paused and where it was resumed.
	status, body := d.get("/v1/workspaces/" + id + "/trajectory?project=workspace&env=dev")
	var tr struct {
		Operations []workspaces.OpRecord `json:"operations"`
	}
	if status != 200 || json.Unmarshal(body, &tr) != nil {
		t.Fatalf("trajectory = %d %s", status, body)
	}
	hosts := map[string]string{}
	for _, op := range tr.Operations {
		if op.Kind == "workspace.pause" || op.Kind == "workspace.resume" {
			var req struct {
				Host string `json:"host"`
			}
			_ = json.Unmarshal(op.Request, &req)
			hosts[op.Kind] = req.Host
		}
	}
	if hosts["workspace.pause"] == "" || hosts["workspace.resume"] == "" || hosts["workspace.pause"] == hosts["workspace.resume"] {
		t.Errorf("pause and resume hosts = %v, want two different workers' hosts", hosts)
	}
}
