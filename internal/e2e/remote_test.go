package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/testenv"
)

// TestRemoteWorker runs the control plane (helmr server) and a worker
// (helmr worker --control-url) as separate processes: the worker leases and
// reports over HTTP with its own worker credential, which the owner made
// with the CLI.
func TestRemoteWorker(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.BaseRootfs(t)
	bin := testenv.Binaries(t)
	tmp := t.TempDir()
	base := append(environ(t), "HELMR_CACHE_DIR="+testenv.CacheDir(), "HELMR_PROFILE="+filepath.Join(tmp, "profile.json"),
		"HELMR_WORKER_TOKEN=", "HELMR_PROJECT=", "HELMR_OWNER_TOKEN="+ownerToken, "HELMR_API_KEY="+ownerToken, "HELMR_STATE_DIR="+testenv.StateRoot(t))
	server := start(t, bin, append(slices.Clip(base), "HELMR_DATA_DIR="+filepath.Join(tmp, "cp"), "HELMR_ADDR=127.0.0.1:0"),
		"Helmr control plane at ", "server")
	d := &dev{t: t, bin: bin, env: append(slices.Clip(base), "HELMR_URL="+server), dataDir: filepath.Join(tmp, "worker"), url: server, api: client.New(server, ownerToken)}
	cred := strings.TrimSpace(d.mustHelmr("apikey", "create", "--worker", "--name", "remote"))
	credID, ok := apikeys.WorkerCredentialID(cred)
	if !ok {
		t.Fatalf("apikey create --worker printed %q, want a worker credential", cred)
	}
	start(t, bin, append(slices.Clip(base), "HELMR_DATA_DIR="+filepath.Join(tmp, "worker"), "HELMR_WORKER_TOKEN="+cred,
		"HELMR_CHECKPOINT_ENCRYPTION_KEY="+newCheckpointKey(t)),
		"Helmr worker leasing runs from ", "worker", "--control-url", server)

	d.deploy("examples/hello")
	r := d.waitDone(d.trigger("hello", "hello", `{"name":"remote"}`).ID, 2*time.Minute)
	if r.Status != runs.StatusCompleted || !strings.Contains(string(r.Output), "Hello, remote!") {
		t.Fatalf("run = %s %+v output %s, want COMPLETED with the greeting", r.Status, r.Error, r.Output)
	}
	if !strings.HasPrefix(r.WorkerID, credID+".") {
		t.Errorf("run's worker = %q, want one of credential %s's workers", r.WorkerID, credID)
	}
	if !strings.Contains(strings.Join(logLines(d.events(r.ID)), "\n"), "hello: wrote hello.txt") {
		t.Errorf("logs sent over HTTP lack the task's lines")
	}
	if data, err := workspaceFile(t, filepath.Join(tmp, "worker"), r.WorkspaceID, "hello.txt"); err != nil || string(data) != "Hello, remote!\n" {
		t.Errorf("worker workspace hello.txt = %q, %v", data, err)
	}
	// Session streams and metadata go over the worker routes.
	d.token = ownerToken
	d.deploy("internal/e2e/testdata/sessions")
	sr := d.trigger("sessions", "echo", `null`)
	d.waitStatus(sr.ID, runs.StatusRunning, 2*time.Minute)
	out := d.readRecords(t.Context(), sr.ID, "output", "")
	if st, _ := d.appendRecord(sr.ID, "input", "r1", `{"text":"remote"}`); st != 201 {
		t.Fatalf("send input = %d, want 201", st)
	}
	if got := collect(t, out, 1); canonicalJSON(t, got[0].Data) != `{"echo":"remote","n":1}` {
		t.Errorf("output over a remote worker = %s, want the echo", got[0].Data)
	}
	d.appendRecord(sr.ID, "input", "r2", `{"done":true}`)
	if f := d.waitDone(sr.ID, time.Minute); f.Status != runs.StatusCompleted || canonicalJSON(t, f.Output) != `{"echoed":1,"seen":1}` {
		t.Errorf("session run = %s %s %+v, want COMPLETED with 1 echo", f.Status, f.Output, f.Error)
	}
	if v, err := d.api.GetRunView(t.Context(), sr.ID); err != nil || string(v.Metadata["echoed"]) != "1" {
		t.Errorf("session run metadata = %s, %v; want echoed 1", fmtMetadata(v.Metadata), err)
	}
	// A server without an owner credential does not start.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "helmr"), "server")
	cmd.Env = append(slices.Clip(base), "HELMR_OWNER_TOKEN=", "HELMR_DATA_DIR="+filepath.Join(tmp, "cp2"), "HELMR_ADDR=127.0.0.1:0")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "needs an owner credential") {
		t.Errorf("helmr server without an owner credential = %v %q, want a refusal", err, out)
	}
	// A wrong worker token is refused.
	bad := client.Worker{C: client.New(server, "wrong")}
	if _, err := bad.Status(context.Background(), r.ID); err == nil || !strings.Contains(err.Error(), "worker token") {
		t.Errorf("status with a wrong token = %v, want an auth error", err)
	}
}

// TestLostWorker kills a remote worker in the middle of a run: the run
// fails once the worker has been silent for the control plane's worker
// TTL, instead of staying RUNNING forever.
func TestLostWorker(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.BaseRootfs(t)
	bin := testenv.Binaries(t)
	tmp := t.TempDir()
	unmountUnder(t, tmp)
	base := append(environ(t), "HELMR_CACHE_DIR="+testenv.CacheDir(), "HELMR_PROFILE="+filepath.Join(tmp, "profile.json"),
		"HELMR_WORKER_TOKEN=test-worker-token", "HELMR_PROJECT=", "HELMR_OWNER_TOKEN="+ownerToken, "HELMR_API_KEY="+ownerToken, "HELMR_WORKER_TTL=2s", "HELMR_HEARTBEAT=300ms",
		"HELMR_STATE_DIR="+testenv.StateRoot(t))
	server := start(t, bin, append(slices.Clip(base), "HELMR_DATA_DIR="+filepath.Join(tmp, "cp"), "HELMR_ADDR=127.0.0.1:0"),
		"Helmr control plane at ", "server")
	worker := exec.Command(filepath.Join(bin, "helmr"), "worker", "--control-url", server)
	worker.Env = append(slices.Clip(base), "HELMR_DATA_DIR="+filepath.Join(tmp, "worker"), "HELMR_RUNTIME=process")
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = worker.Process.Kill(); _ = worker.Wait() }()

	d := &dev{t: t, bin: bin, env: append(slices.Clip(base), "HELMR_URL="+server), url: server, api: client.New(server, ownerToken)}
	d.deploy(failing, "--no-build") // its images fail at run time, each task on its own
	r := d.trigger("failing", "sleeper", "null")
	waitFor(t, time.Minute, func() bool {
		got, err := d.api.GetRun(context.Background(), r.ID)
		return err == nil && got.Status == runs.StatusRunning
	})
	_ = worker.Process.Kill()
	_ = worker.Wait()
	final := d.waitDone(r.ID, 30*time.Second)
	if final.Status != runs.StatusFailed || final.Error == nil || final.Error.Class != runs.ClassGuestRuntime ||
		!strings.Contains(final.Error.Message, "stopped reporting") {
		t.Fatalf("run after its worker died = %s %+v, want FAILED/guest_runtime saying the worker stopped reporting", final.Status, final.Error)
	}

	// The killed worker left its sandboxes' directories, workspace disks
	// still mounted; the next worker on the same data dir clears them.
	stale, _ := filepath.Glob(filepath.Join(tmp, "worker", "booted", "*"))
	if len(stale) == 0 {
		t.Fatal("the killed worker left no booted sandbox behind: the sweep below would prove nothing")
	}
	next := exec.Command(filepath.Join(bin, "helmr"), "worker", "--control-url", server)
	next.Env = worker.Env
	var nextLog syncWriter
	nextLog.w = new(strings.Builder)
	next.Stderr = &nextLog
	defer func() {
		if t.Failed() {
			t.Logf("next worker's log:\n%s", nextLog.String())
		}
	}()
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool {
		for _, p := range stale {
			if _, err := os.Stat(p); err == nil {
				return false
			}
		}
		return true
	})
	_ = next.Process.Signal(os.Interrupt)
	_ = next.Wait()
	if m := testenv.MountsUnder(tmp); len(m) != 0 {
		t.Errorf("mounts left after the next worker stopped: %v", m)
	}
}

// ownerToken is the owner credential the remote tests' control planes
// are started with and their CLI calls send.
const ownerToken = "hko_remote-e2e-owner-credential-0123456789"

// start runs `helmr args...` until the test ends and returns what follows
// prefix on its first matching stdout line.
func start(t *testing.T, bin string, env []string, prefix string, args ...string) string {
	t.Helper()
	v, _ := startStoppable(t, bin, env, prefix, args...)
	return v
}

// startStoppable is start, and returns a function that stops the
// process (as an interrupt does) and waits for it.
func startStoppable(t *testing.T, bin string, env []string, prefix string, args ...string) (string, func()) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "helmr"), args...)
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs syncWriter
	logs.w = new(strings.Builder)
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("helmr %s log:\n%s", args[0], logs.String())
		}
	})
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				got <- strings.Fields(rest)[0]
			}
		}
	}()
	select {
	case v := <-got:
		return v, stop
	case <-time.After(30 * time.Second):
		t.Fatalf("helmr %s did not start; log:\n%s", args[0], logs.String())
		return "", stop
	}
}

// TestLostWorkerRetries kills the worker in the middle of a run whose
// task retries: once the control plane gives the worker up, the run goes
// back to the queue, another worker takes it, and it completes on attempt
// 2 with the lost attempt recorded.
func TestLostWorkerRetries(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.BaseRootfs(t)
	bin := testenv.Binaries(t)
	tmp := t.TempDir()
	unmountUnder(t, tmp)
	base := append(environ(t), "HELMR_CACHE_DIR="+testenv.CacheDir(), "HELMR_PROFILE="+filepath.Join(tmp, "profile.json"),
		"HELMR_WORKER_TOKEN=test-worker-token", "HELMR_PROJECT=", "HELMR_OWNER_TOKEN="+ownerToken, "HELMR_API_KEY="+ownerToken, "HELMR_WORKER_TTL=2s", "HELMR_HEARTBEAT=300ms",
		"HELMR_STATE_DIR="+testenv.StateRoot(t))
	server := start(t, bin, append(slices.Clip(base), "HELMR_DATA_DIR="+filepath.Join(tmp, "cp"), "HELMR_ADDR=127.0.0.1:0"),
		"Helmr control plane at ", "server")
	worker := func(name string) *exec.Cmd {
		w := exec.Command(filepath.Join(bin, "helmr"), "worker", "--control-url", server)
		w.Env = append(slices.Clip(base), "HELMR_DATA_DIR="+filepath.Join(tmp, name), "HELMR_RUNTIME=process", "HELMR_WARM=0")
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Process.Kill(); _ = w.Wait() })
		return w
	}
	first := worker("worker-a")
	d := &dev{t: t, bin: bin, env: append(slices.Clip(base), "HELMR_URL="+server), url: server, api: client.New(server, ownerToken)}
	d.deploy("internal/e2e/testdata/flow", "--no-build")
	r := d.trigger("flow", "lost", "null")
	var lost string
	waitFor(t, time.Minute, func() bool {
		got, err := d.api.GetRun(context.Background(), r.ID)
		lost = got.WorkerID
		return err == nil && got.Status == runs.StatusRunning
	})
	worker("worker-b")
	_ = first.Process.Kill()
	_ = first.Wait()
	final := d.waitDone(r.ID, 90*time.Second)
	if final.Status != runs.StatusCompleted || string(final.Output) != `{"attempt":2}` || final.WorkerID == lost {
		t.Fatalf("run after its worker died = %s %s on %s %+v; events %s", final.Status, final.Output, final.WorkerID, final.Error, systemMessages(d.events(r.ID)))
	}
	if len(final.Attempts) != 1 || final.Attempts[0].WorkerID != lost || final.Attempts[0].Error == nil ||
		final.Attempts[0].Error.Class != runs.ClassGuestRuntime || !strings.Contains(final.Attempts[0].Error.Message, "stopped reporting") {
		t.Errorf("attempts = %+v, want attempt 1 lost with worker %s", final.Attempts, lost)
	}
}

// TestLostWorkerRestoresCheckpoint: a run parked and restored on worker A
// goes on working; A is killed (SIGKILL) and another worker, B, is
// started. Once the control plane gives A up, the run's retry restores the
// same checkpoint on B: the memory it had when it parked (a nonce drawn
// before the wait) is intact, the answer is given again, the events say
// what was lost and kept, and the checkpoint is gone once the run ends.
func TestLostWorkerRestoresCheckpoint(t *testing.T) {
	testenv.RequireRoot(t)
	requireTier(t, "gvisor")
	testenv.BaseRootfs(t)
	bin := testenv.Binaries(t)
	tmp := t.TempDir()
	unmountUnder(t, tmp)
	key := newCheckpointKey(t)
	base := append(environ(t), "HELMR_CACHE_DIR="+testenv.CacheDir(), "HELMR_PROFILE="+filepath.Join(tmp, "profile.json"),
		"HELMR_WORKER_TOKEN=test-worker-token", "HELMR_PROJECT=", "HELMR_OWNER_TOKEN="+ownerToken, "HELMR_API_KEY="+ownerToken,
		"HELMR_WORKER_TTL=2s", "HELMR_HEARTBEAT=300ms", "HELMR_STATE_DIR="+testenv.StateRoot(t))
	cpDir := filepath.Join(tmp, "cp")
	server := start(t, bin, append(slices.Clip(base), "HELMR_DATA_DIR="+cpDir, "HELMR_ADDR=127.0.0.1:0"),
		"Helmr control plane at ", "server")
	worker := func(name string) *exec.Cmd {
		w := exec.Command(filepath.Join(bin, "helmr"), "worker", "--control-url", server)
		w.Env = append(slices.Clip(base), "HELMR_DATA_DIR="+filepath.Join(tmp, name), "HELMR_RUNTIME=gvisor", "HELMR_WARM=0",
			"HELMR_PARK_AFTER=1s", "HELMR_CHECKPOINT_ENCRYPTION_KEY="+key)
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Process.Kill(); _ = w.Wait() })
		return w
	}
	first := worker("worker-a")
	d := &dev{t: t, bin: bin, env: append(slices.Clip(base), "HELMR_URL="+server), dataDir: cpDir, url: server, api: client.New(server, ownerToken)}
	d.deploy("internal/e2e/testdata/waits")
	r := d.trigger("waits", "relapse", `{"afterMs":6000}`)
	var ck, nonce string
	logged := func(prefix string) string {
		for _, ev := range d.events(r.ID) {
			var l runs.LogData
			if ev.Type == runs.EventLog && json.Unmarshal(ev.Data, &l) == nil && strings.HasPrefix(l.Line, prefix) {
				return l.Line
			}
		}
		return ""
	}
	waitFor(t, 90*time.Second, func() bool {
		for _, ev := range d.events(r.ID) {
			var sd runs.SystemData
			if ev.Type == runs.EventSystem && json.Unmarshal(ev.Data, &sd) == nil && strings.HasPrefix(sd.Message, "parked: checkpoint ") {
				ck = sd.Attrs["checkpoint"]
			}
		}
		return ck != ""
	})
	if line := logged("nonce "); line != "" {
		nonce = strings.TrimSuffix(strings.Fields(line)[1], ",")
	}
	if nonce == "" {
		t.Fatalf("no nonce logged before the wait: %s", systemMessages(d.events(r.ID)))
	}
	d.mustHelmr("approve", r.ID, "--data-json", `{"ok":true}`)
	// Restored on A and working: A is lost.
	var lost string
	waitFor(t, 90*time.Second, func() bool {
		cur, err := d.api.GetRun(context.Background(), r.ID)
		lost = cur.WorkerID
		return err == nil && cur.Status == runs.StatusRunning && logged("answered, working") != ""
	})
	worker("worker-b")
	_ = first.Process.Kill()
	_ = first.Wait()
	final := d.waitDone(r.ID, 2*time.Minute)
	msgs := systemMessages(d.events(r.ID))
	if final.Status != runs.StatusCompleted || final.WorkerID == lost {
		t.Fatalf("run after its worker died = %s %s on %s (lost %s) %+v; events %s", final.Status, final.Output, final.WorkerID, lost, final.Error, msgs)
	}
	want := `{"answer":{"data":{"ok":true},"ok":true},"file":"` + nonce + `","nonce":"` + nonce + `"}`
	if got := canonicalJSON(t, final.Output); got != want {
		t.Errorf("output = %s, want %s (the memory of before the park)", got, want)
	}
	if len(final.Attempts) != 1 || final.Attempts[0].WorkerID != lost || final.Attempts[0].Error == nil ||
		!strings.Contains(final.Attempts[0].Error.Message, "kept: checkpoint "+ck) {
		t.Errorf("attempts = %+v, want attempt 1 lost with worker %s, checkpoint %s kept", final.Attempts, lost, ck)
	}
	for _, w := range []string{"restoring checkpoint " + ck, "sandbox restored from checkpoint " + ck} {
		if strings.Count(msgs, w) < 1 {
			t.Errorf("events lack %q:\n%s", w, msgs)
		}
	}
	if n := strings.Count(msgs, "sandbox restored from checkpoint "+ck); n != 2 {
		t.Errorf("restored %d times from %s, want 2 (on A, then on B):\n%s", n, ck, msgs)
	}
	waitFor(t, 10*time.Second, func() bool {
		_, err := readBlob(t, d.env, cpDir, ck)
		return errors.Is(err, errdefs.ErrNotFound)
	})
}
