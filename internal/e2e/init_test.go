package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/testenv"
)

var (
	packOnce sync.Once
	packErr  error
	packOut  string
)

// packSDK packs @helmr/sdk next to the test's helmr (scripts/sdk-pack.sh,
// as make build does), where helmr init looks for it by default.
func packSDK(t *testing.T, bin string) string {
	t.Helper()
	_, err := exec.LookPath("npm")
	testenv.Require(t, err == nil, "packing @helmr/sdk needs npm on PATH")
	packOnce.Do(func() {
		out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "scripts", "sdk-pack.sh"), bin).CombinedOutput()
		packOut, packErr = strings.TrimSpace(string(out)), err
	})
	if packErr != nil {
		t.Fatalf("scripts/sdk-pack.sh: %v\n%s", packErr, packOut)
	}
	return packOut
}

// runIn runs a command in dir and fails the test unless it exits 0.
func runIn(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// greeting starts hello of project with payload through the CLI, waits for
// it and returns its output's greeting.
func (d *dev) greeting(project, payload string) string {
	d.t.Helper()
	r := d.trigger(project, "hello", payload)
	final := d.waitDone(r.ID, 2*time.Minute)
	if final.Status != runs.StatusCompleted {
		d.t.Fatalf("run %s = %s (error %+v), want COMPLETED; logs:\n%s", r.ID, final.Status, final.Error, strings.Join(logLines(d.events(r.ID)), "\n"))
	}
	var out struct {
		Greeting string `json:"greeting"`
	}
	if err := json.Unmarshal(final.Output, &out); err != nil {
		d.t.Fatalf("run %s's output %s: %v", r.ID, final.Output, err)
	}
	return out.Greeting
}

// TestInitProject is issue 18's done-when for a project outside the
// repository: helmr init in an empty directory, npm install (the SDK from
// the vendored tarball, nothing from a registry: --offline), tsc
// --noEmit passing there (and failing on a type error), helmr deploy and
// helmr run. The process tier: nothing here depends on the tier.
func TestInitProject(t *testing.T) {
	d := startDev(t, "process")
	tarball := packSDK(t, d.bin)
	dir := filepath.Join(t.TempDir(), "greeter")
	if strings.HasPrefix(dir, testenv.RepoRoot()+string(filepath.Separator)) {
		t.Fatalf("the project %s must be outside the repository", dir)
	}
	out, errOut, code := d.helmr("init", dir)
	if code != 0 || !strings.Contains(out, `Created task project "greeter"`) || !strings.Contains(out, "vendor/"+filepath.Base(tarball)) {
		t.Fatalf("helmr init = exit %d, %q, %q; want the project greeter with the vendored SDK", code, out, errOut)
	}
	if errOut != "" {
		t.Errorf("helmr init printed %q on stderr, want no warning: the packed SDK is the one helmr embeds", errOut)
	}

	// npm resolves @helmr/sdk from the vendored tarball; typescript and
	// @types/node are the SDK's own pins, which its npm ci cached here.
	runIn(t, dir, "npm", "install", "--offline", "--no-audit", "--no-fund", "--loglevel=error")
	var lock struct {
		Packages map[string]struct {
			Version  string `json:"version"`
			Resolved string `json:"resolved"`
		} `json:"packages"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err == nil {
		err = json.Unmarshal(data, &lock)
	}
	if sdk := lock.Packages["node_modules/@helmr/sdk"]; err != nil || sdk.Resolved != "file:vendor/"+filepath.Base(tarball) {
		t.Errorf("package-lock.json's @helmr/sdk = %+v (%v), want it resolved from the vendored tarball", sdk, err)
	}
	for _, f := range []string{"dist/index.js", "dist/index.d.ts", "dist/client/index.d.ts"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@helmr", "sdk", f)); err != nil {
			t.Errorf("the installed SDK lacks %s: %v", f, err)
		}
	}

	// The editor's check: the scaffold type-checks against the installed
	// SDK's declarations, and a type error is one.
	runIn(t, dir, "npx", "--no-install", "tsc", "--noEmit")
	bad := filepath.Join(dir, "tasks", "bad.ts")
	if err := os.WriteFile(bad, []byte("import { task } from \"@helmr/sdk\";\nexport const bad = task({ id: \"bad\", maxDuration: \"soon\", run: async () => 1 });\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("npx", "--no-install", "tsc", "--noEmit")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "tasks/bad.ts") {
		t.Errorf("tsc --noEmit with tasks/bad.ts = %v, %s; want a type error there", err, out)
	}
	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}

	out = d.mustHelmr("deploy", dir)
	if !strings.Contains(out, "deployed greeter/dev version 1") || !strings.Contains(out, "task hello") {
		t.Fatalf("helmr deploy printed %q, want greeter version 1 with the task hello", out)
	}
	out = d.mustHelmr("run", "hello", "--project", "greeter", "--payload-json", `{"name":"Ada"}`, "--wait")
	if !strings.Contains(out, "COMPLETED") || !strings.Contains(out, "Hello, Ada!") {
		t.Errorf("helmr run hello --wait printed %q, want it COMPLETED with the greeting", out)
	}
}

// TestDevWatch: helmr dev --watch deploys the project at start, and after
// an edit of its task deploys a new version that runs the new code; a
// deploy that fails is printed and the watch goes on.
func TestDevWatch(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "watched")
	bin := testenv.Binaries(t)
	packSDK(t, bin)
	initCmd := exec.Command(filepath.Join(bin, "helmr"), "init", dir)
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("helmr init: %v\n%s", err, out)
	}
	d := startDevWith(t, "process", []string{"--watch", dir})
	waitOutput := func(want string) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for !strings.Contains(d.stdout.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("helmr dev --watch did not print %q; it printed:\n%s", want, d.stdout.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitOutput("deployed watched/dev version 1")
	if got := d.greeting("watched", `{"name":"Ada"}`); got != "Hello, Ada!" {
		t.Errorf("version 1's greeting = %q, want Hello, Ada!", got)
	}

	task := filepath.Join(dir, "tasks", "hello.ts")
	src, err := os.ReadFile(task)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(src), "const greeting = ", "const greeting = (", 1)
	if err := os.WriteFile(task, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	waitOutput("watch: changed tasks/hello.ts; deploying")
	waitOutput("watch: the deploy failed: ")

	edited := strings.Replace(string(src), "`Hello, ${name}!`", "`Howdy, ${name}!`", 1)
	if edited == string(src) {
		t.Fatalf("tasks/hello.ts has no Hello greeting to edit:\n%s", src)
	}
	if err := os.WriteFile(task, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	waitOutput("deployed watched/dev version 2")
	if got := d.greeting("watched", `{"name":"Ada"}`); got != "Howdy, Ada!" {
		t.Errorf("version 2's greeting = %q, want the edited Howdy, Ada!", got)
	}
	t.Logf("helmr dev --watch printed:\n%s", d.stdout.String())
	if n := strings.Count(d.stdout.String(), "watch: changed tasks/hello.ts; deploying"); n != 2 {
		t.Errorf("helmr dev --watch announced %d deploys of tasks/hello.ts, want 2 (the broken and the fixed):\n%s", n, d.stdout.String())
	}
}
