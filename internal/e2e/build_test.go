package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
)

// TestImageBuild runs tasks whose images have run steps on the gVisor tier:
// the steps' files and deletions are in the task's image, an unchanged
// rebuild runs no step, a named cache keeps its contents across builds, a
// failing step fails the run naming the step with its output. On the
// process tier, run steps fail the run with a clear message.
func TestImageBuild(t *testing.T) { forEachTier(t, testImageBuild) }

func testImageBuild(t *testing.T, tier string) {
	d := startDev(t, tier)
	d.deploy("internal/e2e/testdata/build", "--no-build") // images built at each task's first run
	if tier == "process" {
		r := d.waitDone(d.trigger("build", "first", "null").ID, time.Minute)
		if r.Status != runs.StatusFailed || r.Error == nil || r.Error.Class != runs.ClassImagePreparation ||
			!strings.Contains(r.Error.Message, "use the gvisor tier") {
			t.Fatalf("run = %s %+v, want FAILED/image_preparation pointing at the gvisor tier", r.Status, r.Error)
		}
		return
	}
	type report struct {
		Built, Count, Tag, Cwd string
		DebianVersion          bool
	}
	runTask := func(task string) (report, []string) {
		t.Helper()
		r := d.waitDone(d.trigger("build", task, "null").ID, 5*time.Minute)
		if r.Status != runs.StatusCompleted {
			t.Fatalf("%s = %s %+v", task, r.Status, r.Error)
		}
		var rep report
		if err := json.Unmarshal(r.Output, &rep); err != nil {
			t.Fatal(err)
		}
		var build []string
		for _, ev := range d.events(r.ID) {
			var l runs.LogData
			if ev.Type == runs.EventLog && json.Unmarshal(ev.Data, &l) == nil && l.Stream == "build" {
				build = append(build, l.Line)
			}
		}
		return rep, build
	}
	rep, build := runTask("first")
	if rep != (report{Built: "built-by-step", Count: "1", Tag: "a", Cwd: "/workspace"}) {
		t.Errorf("first image = %+v, want the steps' files, /etc/debian_version deleted, count 1, the task in its workspace", rep)
	}
	if all := strings.Join(build, "\n"); !strings.Contains(all, "step 3: run sh -c") || !strings.Contains(all, "counted a") {
		t.Errorf("build log of the first run:\n%s\nwant each step's header and output", all)
	}
	// Nothing changed: the image comes from the cache, no step runs.
	rep, build = runTask("first")
	if rep.Count != "1" {
		t.Errorf("rebuild changed the image: %+v", rep)
	}
	if all := strings.Join(build, "\n"); strings.Contains(all, "counted") || strings.Count(all, "(cached)") != 2 {
		t.Errorf("build log of the unchanged rebuild:\n%s\nwant both run steps cached, none run", all)
	}
	// A changed step runs again, after the unchanged first step, and sees
	// what the shared cache kept from the first build.
	rep, build = runTask("second")
	if rep.Count != "2" || rep.Tag != "b" || rep.Built != "built-by-step" {
		t.Errorf("second image = %+v, want count 2 (the cache persisted), tag b", rep)
	}
	if all := strings.Join(build, "\n"); !strings.Contains(all, "step 1: run sh -c 'echo built-by-step > /etc/helmr-built && rm /etc/debian_version' (cached)") || !strings.Contains(all, "counted b") {
		t.Errorf("build log of the changed image:\n%s\nwant step 1 cached and step 3 run", all)
	}

	// The same image built by the CLI on this machine shares the worker's
	// layer cache; --no-cache runs the steps again; exports are written.
	out := d.mustHelmr("image", "build", "internal/e2e/testdata/build", "first")
	if !strings.Contains(out, "(cached)") || strings.Contains(out, "counted") {
		t.Errorf("helmr image build after the runs:\n%s\nwant every step cached", out)
	}
	exported := t.TempDir()
	out = d.mustHelmr("image", "build", "internal/e2e/testdata/build", "first", "--no-cache",
		"--oci", filepath.Join(exported, "oci"), "--ext4", filepath.Join(exported, "root.ext4"))
	if !strings.Contains(out, "counted a") || !strings.Contains(out, "wrote OCI image layout") {
		t.Errorf("helmr image build --no-cache:\n%s\nwant the steps run and the exports written", out)
	}
	for _, p := range []string{"oci/index.json", "oci/oci-layout", "root.ext4"} {
		if _, err := os.Stat(filepath.Join(exported, p)); err != nil {
			t.Errorf("export %s: %v", p, err)
		}
	}
	if _, errOut, code := d.helmr("image", "build", "internal/e2e/testdata/build", "nosuch"); code == 0 || !strings.Contains(errOut, `no task "nosuch"`) {
		t.Errorf("image build of an unknown task = %d %q", code, errOut)
	}

	seeded := d.waitDone(d.trigger("build", "seeded", "null").ID, 2*time.Minute)
	if seeded.Status != runs.StatusCompleted || string(seeded.Output) != `"seeded"` {
		t.Errorf("seeded = %s %s %+v, want the image's /workspace content in the run's workspace", seeded.Status, seeded.Output, seeded.Error)
	}
	shadow := d.waitDone(d.trigger("build", "shadow", "null").ID, 2*time.Minute)
	if shadow.Status != runs.StatusFailed || shadow.Error == nil || shadow.Error.Class != runs.ClassImagePreparation ||
		!strings.Contains(shadow.Error.Message, "files under /opt/helmr") {
		t.Errorf("shadow = %s %+v, want FAILED/image_preparation about /opt/helmr", shadow.Status, shadow.Error)
	}

	// Build secrets: readable during their step, found nowhere afterwards.
	const tokenValue, envValue = "build-token-Qx7Lm2", "build-env-Pz9Kw4"
	for name, v := range map[string]string{"BUILD_TOKEN": tokenValue, "BUILD_ENV": envValue} {
		cmd := exec.Command(filepath.Join(d.bin, "helmr"), "secret", "set", name, "--project", "build")
		cmd.Env, cmd.Stdin = d.env, strings.NewReader(v)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("secret set %s: %v: %s", name, err, out)
		}
	}
	sr := d.waitDone(d.trigger("build", "secret-build", "null").ID, 2*time.Minute)
	if sr.Status != runs.StatusCompleted {
		t.Fatalf("secret-build = %s %+v", sr.Status, sr.Error)
	}
	var lengths struct {
		Token, Env string
		SecretsDir bool
	}
	json.Unmarshal(sr.Output, &lengths)
	if lengths.Token != fmt.Sprint(len(tokenValue)) || lengths.Env != fmt.Sprint(len(envValue)) || lengths.SecretsDir {
		t.Errorf("secret-build = %s, want the step to have read both secrets (%d, %d bytes) and the task to see no /run/secrets/token", sr.Output, len(tokenValue), len(envValue))
	}
	var buildLog []string
	for _, ev := range d.events(sr.ID) {
		var l runs.LogData
		if ev.Type == runs.EventLog && json.Unmarshal(ev.Data, &l) == nil {
			buildLog = append(buildLog, l.Line)
		}
	}
	logText := strings.Join(buildLog, "\n")
	if !strings.Contains(logText, "read [redacted build secret] and [redacted build secret]") || !strings.Contains(logText, "as base64: [redacted build secret]") {
		t.Errorf("build log:\n%s\nwant the step's output with both values redacted", logText)
	}
	for _, v := range []string{tokenValue, envValue} {
		if strings.Contains(logText, v) || strings.Contains(logText, base64.StdEncoding.EncodeToString([]byte(v))) {
			t.Errorf("the build log holds a build secret (or its base64)")
		}
		// Every layer and every other file of the worker's data dir.
		filepath.WalkDir(d.dataDir, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() && !strings.HasSuffix(p, ".img") && !strings.Contains(p, "helmr.db") {
				if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), v) {
					t.Errorf("%s holds a build secret", p)
				}
			}
			return nil
		})
	}

	// helmr image build resolves build secrets from the same vault.
	out = d.mustHelmr("image", "build", "internal/e2e/testdata/build", "secret-build", "--no-cache")
	if !strings.Contains(out, "read [redacted build secret] and [redacted build secret]") || strings.Contains(out, tokenValue) || strings.Contains(out, envValue) {
		t.Errorf("helmr image build with build secrets:\n%s", out)
	}

	r := d.waitDone(d.trigger("build", "badstep", "null").ID, 2*time.Minute)
	if r.Status != runs.StatusFailed || r.Error == nil || r.Error.Class != runs.ClassImagePreparation {
		t.Fatalf("badstep = %s %+v, want FAILED/image_preparation", r.Status, r.Error)
	}
	for _, want := range []string{"step 1 (run sh -c 'echo about to fail; echo on stderr >&2; exit 7')", "exit code 7", "about to fail", "on stderr"} {
		if !strings.Contains(r.Error.Message, want) {
			t.Errorf("badstep error %q lacks %q", r.Error.Message, want)
		}
	}
}
