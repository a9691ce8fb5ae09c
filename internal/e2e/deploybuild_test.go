package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/runs"
)

// TestDeployBuild builds images at deploy. On gVisor: helmr deploy shows
// each step's output as it runs and records the image's digest on a READY
// deployment; the run reuses that image (no step runs) and needs its
// digest; a redeploy with nothing changed runs no step and --no-cache runs
// them again; a version whose step fails is FAILED/deployment_build naming
// the step, with its output, and the previous version stays current. On
// the process tier, which cannot run build steps, the deploy fails saying
// so. A microvm worker runs them in gvisor sandboxes, saying so, and its
// runs use the image in VMs.
func TestDeployBuild(t *testing.T) { forEachTier(t, testDeployBuild) }

func testDeployBuild(t *testing.T, tier string) {
	d := startDev(t, tier)
	ctx := context.Background()
	if tier == "process" {
		out, errOut, code := d.helmr("deploy", "internal/e2e/testdata/deploybuild")
		if code == 0 || !strings.Contains(errOut, "deployment_build: image app: step 1 (run sh -c") || !strings.Contains(errOut, "gvisor tier") {
			t.Fatalf("deploy on the process tier = exit %d\nstdout: %s\nstderr: %s\nwant deployment_build pointing at the gvisor tier", code, out, errOut)
		}
		// The checks a run makes before it boots fail the deploy too.
		out, errOut, code = d.helmr("deploy", "internal/e2e/testdata/failing")
		if code == 0 || !strings.Contains(errOut, "deployment_build: image nonode: task nonode: the image does not provide node on PATH") {
			t.Fatalf("deploy of an image without node = exit %d\nstdout: %s\nstderr: %s\nwant deployment_build naming the task and node", code, out, errOut)
		}
		return
	}

	deploy := func(dir string, flags ...string) (deployments.Deployment, string, int) {
		t.Helper()
		out, errOut, code := d.helmr(append([]string{"deploy", dir, "--json"}, flags...)...)
		var dep deployments.Deployment
		if err := json.Unmarshal([]byte(out), &dep); err != nil {
			t.Fatalf("helmr deploy --json printed %q (stderr %s): %v", out, errOut, err)
		}
		return dep, errOut, code
	}
	v1, progress, code := deploy("internal/e2e/testdata/deploybuild")
	img := v1.Images["app"]
	if code != 0 || v1.Status != deployments.StatusReady || !strings.HasPrefix(img.Digest, "sha256:") ||
		img.Base != "helmr/bookworm-node22" || !strings.HasPrefix(img.BaseDigest, "sha256:") {
		t.Fatalf("deploy = exit %d, %s, images %+v; want READY with the app image's digest", code, v1.Status, v1.Images)
	}
	wants := []string{"building images on a worker (build run " + v1.BuildRunID, "==> image 1/1: app (task app)",
		"step 1: run sh -c 'echo step-ran; echo built-at-deploy > /etc/app-built'", "│ step-ran", "image app: " + img.Digest}
	if tier == "microvm" {
		// Its guests take no build steps: a gvisor sandbox runs them, and
		// the build log says so.
		wants = append(wants, "image build steps run on the gvisor tier: the microvm tier runs none")
	}
	for _, want := range wants {
		if !strings.Contains(progress, want) {
			t.Errorf("deploy progress lacks %q:\n%s", want, progress)
		}
	}
	stored, err := d.api.GetDeployment(ctx, v1.ID)
	if err != nil || stored.Status != deployments.StatusReady || stored.Images["app"] != img {
		t.Errorf("GET deployment = %s %+v, %v; want READY with the image", stored.Status, stored.Images, err)
	}
	builds, err := d.api.ListRuns(ctx, "deploybuild", "dev", runs.Filter{Limit: 10})
	if err != nil || len(builds.Runs) != 0 {
		t.Errorf("task runs after the deploy = %d, %v; want none (build runs are listed apart)", len(builds.Runs), err)
	}
	if out := d.mustHelmr("runs", "--project", "deploybuild", "--kind", "build"); !strings.Contains(out, v1.BuildRunID) {
		t.Errorf("helmr runs --kind build:\n%s\nwant the build run %s", out, v1.BuildRunID)
	}

	// The run uses the image built at deploy: no step runs again.
	r := d.waitDone(d.trigger("deploybuild", "app", "null").ID, 2*time.Minute)
	if r.Status != runs.StatusCompleted || string(r.Output) != `"built-at-deploy"` || r.Needs.Image != img.Digest ||
		len(r.Needs.Digests) != 1 || r.Needs.Digests[0] != "rootfs:"+img.Base+"@"+img.BaseDigest {
		t.Fatalf("run = %s %s %+v, needs %+v; want the image built at deploy", r.Status, r.Output, r.Error, r.Needs)
	}
	for _, ev := range d.events(r.ID) {
		var l runs.LogData
		if ev.Type == runs.EventLog && json.Unmarshal(ev.Data, &l) == nil && l.Stream == "build" && l.Line == "step-ran" {
			t.Errorf("the run ran a build step again: %q", l.Line)
		}
	}

	// Unchanged: a new version, every step cached. --no-cache: run again.
	v2, progress, code := deploy("internal/e2e/testdata/deploybuild")
	if code != 0 || v2.Status != deployments.StatusReady || v2.Images["app"].Digest != img.Digest ||
		!strings.Contains(progress, "(cached)") || strings.Contains(progress, "│ step-ran") {
		t.Errorf("unchanged redeploy = exit %d %s %+v:\n%s\nwant READY, same digest, the step cached", code, v2.Status, v2.Images, progress)
	}
	v3, progress, code := deploy("internal/e2e/testdata/deploybuild", "--no-cache")
	if code != 0 || v3.Status != deployments.StatusReady || !strings.Contains(progress, "│ step-ran") {
		t.Errorf("deploy --no-cache = exit %d %s:\n%s\nwant the step run again", code, v3.Status, progress)
	}
	if _, errOut, code := d.helmr("deploy", "internal/e2e/testdata/deploybuild", "--no-build", "--no-cache"); code == 0 || !strings.Contains(errOut, "pass one of them") {
		t.Errorf("deploy --no-build --no-cache = exit %d %q, want a usage error", code, errOut)
	}

	// A failing step fails the deploy; v3 stays current.
	bad, errOut, code := deploy("internal/e2e/testdata/deploybuild-bad")
	if code == 0 || bad.Status != deployments.StatusFailed {
		t.Fatalf("deploy of a failing step = exit %d, %s; want FAILED", code, bad.Status)
	}
	for _, want := range []string{"│ breaking-step-output", "deployment_build: image app: step 1 (run sh -c 'echo breaking-step-output; exit 3')", "exit code 3", "the previous version stays current"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("failed deploy's stderr lacks %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(bad.BuildError, "step 1 (run sh -c") {
		t.Errorf("FAILED deployment's buildError = %q, want the step named", bad.BuildError)
	}
	r = d.waitDone(d.trigger("deploybuild", "app", "null").ID, 2*time.Minute)
	if r.Status != runs.StatusCompleted || r.DeploymentID != v3.ID {
		t.Errorf("run after the failed deploy = %s on %s, want COMPLETED on the last good version %s", r.Status, r.DeploymentID, v3.ID)
	}
}
