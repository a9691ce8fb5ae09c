// Package e2e drives the real helmr binary end to end: helmr dev with the
// embedded store and the process tier, and the CLI verbs against it.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/blobs"
	"github.com/helmr/helmr/internal/blobs/s3"
	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/config"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox/disk"
	"github.com/helmr/helmr/internal/sandbox/tiers"
	"github.com/helmr/helmr/internal/testenv"
)

// dev is a running `helmr dev` and the environment its CLI calls share.
type dev struct {
	t       *testing.T
	bin     string
	base    []string // the environment helmr dev starts with
	env     []string // base and the running helmr dev's URL
	dataDir string
	// tierDetail is what the tier's probe says it runs on here ("QEMU
	// microvm under TCG, ...").
	tierDetail string
	profile    string // the CLI profile helmr dev writes
	url        string
	token      string // the owner credential helmr dev wrote to the profile
	api        *client.Client
	args       []string    // helmr dev's flags
	stdout     *syncWriter // what the running helmr dev printed on stdout
	stop       func()      // stops the running helmr dev (once)
	kill       func()      // kills it (SIGKILL): no chance to clean up
}

// forEachTier runs fn as a subtest per isolation tier that runs tasks
// end to end (see e2eTiers), but for the microvm tier only where the
// test is not in microVMLeavesOut.
func forEachTier(t *testing.T, fn func(t *testing.T, tier string)) {
	for _, tier := range e2eTiers() {
		if why, out := microVMLeavesOut[t.Name()]; tier == "microvm" && out && os.Getenv("HELMR_TEST_MICROVM") != "all" {
			t.Logf("microvm: not run here: %s", why)
			continue
		}
		t.Run(tier, func(t *testing.T) { fn(t, tier) })
	}
}

// e2eTiers are the tiers of this build (the tier registry's) that the
// worker drives end to end: all of them.
func e2eTiers() []string { return tiers.Built() }

// microVMLeavesOut are the tests of every tier that do not run on the
// microvm tier, and why. Its guests are emulated here (TCG: a boot takes
// seconds, every command is slow), so the suite runs the subset that
// shows the worker driving it (TestHelloEndToEnd, TestWorkspaces,
// TestWorkspaceExec, TestEgress, TestEgressCredentials,
// TestSandboxIsolation, TestRunFailures, TestDeployBuild, TestWaits, and
// beyond forEachTier TestParkedWait, TestE2BResumeOnAnotherWorker,
// TestTiersShareStateRoot and the tests of microvm_test.go; about four
// minutes under TCG) and leaves out
// what only repeats, on a slower tier, what the others and the tier's own
// conformance suite (internal/sandbox/microvm) cover.
// HELMR_TEST_MICROVM=all runs them on microvm too.
var microVMLeavesOut = map[string]string{
	"TestImageBuild":        "build steps run on gvisor for a microvm worker; TestDeployBuild covers that",
	"TestWorkspaceOwnQuota": "it needs HELMR_WORKSPACE_QUOTA=0, and a microvm worker keeps every workspace on a disk",
	"TestWritableRoot":      "the conformance suite's WritableRoot covers it on the tier",
	"TestRunSecrets":        "run secrets reach the task in its start message, the same on every tier; TestWorkspaceExec puts vault secrets into a microvm",
	"TestSessions":          "session streams go over the adapter's channel, the same on every tier; TestWaits drives that channel on microvm",
	"TestWorkspaceSandbox":  "TestWorkspaceExec drives the operations sandbox",
	"TestWorkspaceMoves":    "several workers moving workspaces: gvisor and process cover the worker's side, a disk image moves as on gvisor",
}

// requireTier skips (fails on CI) when the host lacks what tier needs, as
// the tier's probe says (the agent is built by the test), and returns
// what the probe says the tier runs on.
func requireTier(t *testing.T, tier string) string {
	t.Helper()
	tr, ok := tiers.Lookup(tier)
	if !ok {
		t.Fatalf("no tier %q in the registry", tier)
	}
	agent := filepath.Join(testenv.Binaries(t), "helmr-agent")
	detail, err := tr.Probe(tiers.Host{Runsc: os.Getenv("HELMR_RUNSC"), CacheDir: testenv.CacheDir(), Agent: agent})
	testenv.Require(t, err == nil, fmt.Sprintf("the %s tier cannot run here: %v", tier, err))
	return detail
}

// startDev starts helmr dev on tier, on a free loopback port with a fresh
// data dir and state root; env adds or overrides HELMR_* settings.
func startDev(t *testing.T, tier string, env ...string) *dev {
	t.Helper()
	return startDevWith(t, tier, nil, env...)
}

// startDevWith is startDev with helmr dev's flags.
func startDevWith(t *testing.T, tier string, args []string, env ...string) *dev {
	t.Helper()
	testenv.RequireRoot(t)
	detail := requireTier(t, tier)
	testenv.BaseRootfs(t)
	_, err := exec.LookPath("node")
	testenv.Require(t, err == nil, "deploy needs node on PATH")
	bin := testenv.Binaries(t)
	tmp := t.TempDir()
	d := &dev{t: t, bin: bin, dataDir: filepath.Join(tmp, "data"), args: args, tierDetail: detail}
	d.base = append(environ(t),
		"HELMR_DATA_DIR="+d.dataDir, "HELMR_PROFILE="+filepath.Join(tmp, "profile.json"),
		"HELMR_ADDR=127.0.0.1:0", "HELMR_CACHE_DIR="+testenv.CacheDir(), "HELMR_PROJECT=", "HELMR_URL=",
		"HELMR_RUNTIME="+tier, "HELMR_API_KEY=", "HELMR_OWNER_TOKEN=", "HELMR_OWNER_TOKEN_FILE=",
		"HELMR_STATE_DIR="+testenv.StateRoot(t))
	d.base = append(d.base, env...)
	d.profile = filepath.Join(tmp, "profile.json")
	d.launch()
	return d
}

// launch starts helmr dev with d's settings and waits for its URL.
func (d *dev) launch() {
	t := d.t
	t.Helper()
	d.env = slices.Clip(d.base)
	cmd := exec.Command(filepath.Join(d.bin, "helmr"), append([]string{"dev"}, d.args...)...)
	cmd.Env = d.env
	d.stdout = &syncWriter{w: new(bytes.Buffer)}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncWriter{w: new(bytes.Buffer)}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.kill = func() {
		_ = cmd.Process.Kill()
	}
	var once sync.Once
	d.stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("helmr dev log:\n%s", logs.String())
			}
		})
	}
	t.Cleanup(d.stop)
	urlCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			_, _ = d.stdout.Write([]byte(sc.Text() + "\n"))
			if rest, ok := strings.CutPrefix(sc.Text(), "Helmr dev at "); ok {
				urlCh <- strings.Fields(rest)[0]
			}
		}
	}()
	select {
	case d.url = <-urlCh:
	case <-time.After(30 * time.Second):
		t.Fatalf("helmr dev did not print its URL; log:\n%s", logs.String())
	}
	d.env = append(d.env, "HELMR_URL="+d.url)
	p, err := config.LoadProfile(d.profile)
	if err != nil || p.Credential == "" || p.URL != d.url {
		t.Fatalf("helmr dev's profile = url %q with credential %v (%v), want its URL %q and a credential", p.URL, p.Credential != "", err, d.url)
	}
	d.token = p.Credential
	d.api = client.New(d.url, d.token)
}

// crash kills helmr dev with SIGKILL (its sandboxes, mounts and state
// left as they were) and starts it again on the same data dir.
func (d *dev) crash() {
	d.t.Helper()
	d.kill()
	d.stop() // reaps it
	d.launch()
}

// restart stops helmr dev and starts it again on the same data dir (a
// fresh worker; the store, vault, owner credential and workspaces stay).
func (d *dev) restart() {
	d.t.Helper()
	d.stop()
	d.launch()
}

// do sends an HTTP request to the API with the owner credential.
func (d *dev) do(req *http.Request) *http.Response {
	d.t.Helper()
	req.Header.Set("Authorization", "Bearer "+d.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	return resp
}

// get reads an API path with the owner credential.
func (d *dev) get(path string) (int, []byte) {
	d.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, d.url+path, nil)
	resp := d.do(req)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// helmr runs the CLI and returns stdout, stderr and the exit code.
func (d *dev) helmr(args ...string) (string, string, int) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(d.bin, "helmr"), args...)
	cmd.Env = d.env
	cmd.Dir = testenv.RepoRoot()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatalf("helmr %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// mustHelmr runs the CLI and fails the test on a non-zero exit.
func (d *dev) mustHelmr(args ...string) string {
	d.t.Helper()
	out, errOut, code := d.helmr(args...)
	if code != 0 {
		d.t.Fatalf("helmr %s exited %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// deploy deploys a project directory (relative to the repo root).
func (d *dev) deploy(dir string, flags ...string) {
	d.t.Helper()
	d.mustHelmr(append([]string{"deploy", dir}, flags...)...)
}

// trigger starts a run and returns it.
func (d *dev) trigger(project, task, payload string) runs.Run {
	d.t.Helper()
	out := d.mustHelmr("run", task, "--project", project, "--payload-json", payload, "--json")
	var r runs.Run
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		d.t.Fatalf("helmr run --json printed %q: %v", out, err)
	}
	return r
}

// waitStatus polls until the run is terminal (or the deadline passes).
func (d *dev) waitDone(id string, within time.Duration) runs.Run {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := d.api.GetRun(context.Background(), id)
		if err != nil {
			d.t.Fatalf("get run %s: %v", id, err)
		}
		if r.Status.Terminal() {
			return r
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("run %s still %s after %s", id, r.Status, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// events reads all of a run's events.
func (d *dev) events(id string) []runs.Event {
	d.t.Helper()
	var all []runs.Event
	var after int64
	for {
		p, err := d.api.Events(context.Background(), id, after)
		if err != nil {
			d.t.Fatalf("events of %s: %v", id, err)
		}
		all = append(all, p.Events...)
		if len(p.Events) == 0 {
			return all
		}
		after = p.NextCursor
	}
}

func logLines(evs []runs.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type == runs.EventLog {
			var l runs.LogData
			_ = json.Unmarshal(ev.Data, &l)
			out = append(out, l.Line)
		}
	}
	return out
}

func statuses(evs []runs.Event) []runs.Status {
	var out []runs.Status
	for _, ev := range evs {
		if ev.Type == runs.EventStatus {
			var s runs.StatusData
			_ = json.Unmarshal(ev.Data, &s)
			out = append(out, s.To)
		}
	}
	return out
}

type syncWriter struct {
	mu sync.Mutex
	w  interface {
		Write([]byte) (int, error)
		String() string
	}
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// workspaceFile reads a file of a workspace no run holds, on a worker
// with data dir dataDir: from its disk image (mounted read-only for the
// read) under a workspace quota, else from its directory.
func workspaceFile(t *testing.T, dataDir, workspaceID, name string) ([]byte, error) {
	t.Helper()
	if workspaceID == "" {
		t.Fatal("workspaceFile: the run has no workspace")
	}
	base := filepath.Join(dataDir, "workspaces", workspaceID)
	if _, err := os.Stat(base + ".img"); err != nil {
		return os.ReadFile(filepath.Join(base, name))
	}
	dir := t.TempDir()
	d, err := disk.Mount(base+".img", dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}()
	return os.ReadFile(filepath.Join(dir, name))
}

// unmountUnder detaches whatever a killed helmr process left mounted below
// dir before the test's temporary directories are removed.
func unmountUnder(t *testing.T, dir string) {
	t.Cleanup(func() {
		for _, m := range testenv.MountsUnder(dir) {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	})
}

// environ is the environment the test's helmr processes start from:
// os.Environ(), and with HELMR_TEST_BLOBS=s3 the settings that keep the
// control planes' blobs in the test S3 server (scripts/s3-test.sh), under
// a prefix of the test's own.
func environ(t *testing.T) []string {
	t.Helper()
	env := os.Environ()
	if os.Getenv("HELMR_TEST_BLOBS") == "s3" {
		env = append(env, testenv.S3Server(t).Env(testenv.S3Prefix(t))...)
	}
	return env
}

// blobStore opens the blob store of the test's control plane that runs
// with env and data dir dataDir: the S3 prefix env's HELMR_BLOB_URL names
// (see environ), else DATA_DIR/blobs. The tests look at or damage blobs
// through it.
func blobStore(t *testing.T, env []string, dataDir string) blobs.Store {
	t.Helper()
	var (
		s   blobs.Store
		err error
	)
	if u := lastValue(env, "HELMR_BLOB_URL"); u != "" {
		srv := testenv.S3Server(t)
		s, err = s3.New(t.Context(), s3.Config{URL: u, Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true})
	} else {
		s, err = blobs.NewDir(filepath.Join(dataDir, "blobs"))
	}
	if err != nil {
		t.Fatalf("open the control plane's blob store: %v", err)
	}
	return s
}

// lastValue is the last value of name in env.
func lastValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// readBlob reads blob id of the control plane that runs with env and
// data dir dataDir.
func readBlob(t *testing.T, env []string, dataDir, id string) ([]byte, error) {
	t.Helper()
	rc, err := blobStore(t, env, dataDir).Get(t.Context(), id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// writeBlob replaces blob id of the control plane that runs with env and
// data dir dataDir (to damage it).
func writeBlob(t *testing.T, env []string, dataDir, id string, data []byte) {
	t.Helper()
	if _, err := blobStore(t, env, dataDir).Put(t.Context(), id, bytes.NewReader(data)); err != nil {
		t.Fatalf("write blob %s: %v", id, err)
	}
}
