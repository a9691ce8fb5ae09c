package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/testenv"
)

func newCheckpointKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k)
}

// startParking starts helmr dev on the gVisor tier with one slot, parking
// waits after a second, under key.
func startParking(t *testing.T, key string) *dev {
	t.Helper()
	return startParkingOn(t, "gvisor", key)
}

// startParkingOn is startParking on tier.
func startParkingOn(t *testing.T, tier, key string) *dev {
	t.Helper()
	d := startDev(t, tier, "HELMR_PARK_AFTER=1s", "HELMR_SLOTS=1", "HELMR_WARM=0", "HELMR_CHECKPOINT_ENCRYPTION_KEY="+key)
	d.deploy("internal/e2e/testdata/waits")
	return d
}

// parkedRun starts the approval task and waits until it is parked; it
// returns the run, its checkpoint id and the sandbox it ran in.
func (d *dev) parkedRun(n int) (runs.Run, string, string) {
	d.t.Helper()
	r := d.trigger("waits", "approval", `{"n":`+strconv.Itoa(n)+`}`)
	deadline := time.Now().Add(90 * time.Second)
	for {
		var ck, sbx string
		for _, ev := range d.events(r.ID) {
			if ev.Type != runs.EventSystem {
				continue
			}
			var sd runs.SystemData
			if json.Unmarshal(ev.Data, &sd) != nil {
				continue
			}
			if s := sd.Attrs["sandbox"]; s != "" {
				sbx = s
			}
			if strings.HasPrefix(sd.Message, "parked: checkpoint ") {
				ck = sd.Attrs["checkpoint"]
			}
		}
		if ck != "" {
			return r, ck, sbx
		}
		cur, err := d.api.GetRun(d.t.Context(), r.ID)
		if err != nil || cur.Status.Terminal() || time.Now().After(deadline) {
			d.t.Fatalf("run %s not parked: %s %+v (%v); events %s", r.ID, cur.Status, cur.Error, err, systemMessages(d.events(r.ID)))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestParkedWait is issue 6's parked wait on each tier that checkpoints
// (gVisor, and a microVM, whose workspace is a disk image of the guest's):
// a run that computed state in memory and in its workspace waits for a
// human, is parked (its sandbox gone, its slot free, its checkpoint
// stored sealed), the worker is replaced by a fresh one, the run is
// approved through the CLI, and it finishes restored: memory, workspace
// and the answer intact.
func TestParkedWait(t *testing.T) {
	for _, tier := range []string{"gvisor", "microvm"} {
		t.Run(tier, func(t *testing.T) { testParkedWait(t, tier) })
	}
}

func testParkedWait(t *testing.T, tier string) {
	d := startParkingOn(t, tier, newCheckpointKey(t))
	r, ck, sbx := d.parkedRun(5)
	if v := d.waitWaiting(r.ID, 10*time.Second); v.Status != runs.StatusWaiting {
		t.Fatalf("parked run is %s, want WAITING", v.Status)
	}
	if sbx == "" {
		t.Fatal("no sandbox id in the run's events")
	}
	if procs := sandboxProcesses(sbx); len(procs) > 0 {
		t.Errorf("processes of the parked sandbox %s still run: %v", sbx, procs)
	}
	// The only slot is free: another run completes while this one is parked.
	q := d.trigger("waits", "quick", `{}`)
	if final := d.waitDone(q.ID, 90*time.Second); final.Status != runs.StatusCompleted {
		t.Errorf("a run while the other is parked = %s %+v, want COMPLETED (the slot is free)", final.Status, final.Error)
	}
	blob, err := readBlob(t, d.env, d.dataDir, ck)
	if err != nil {
		t.Fatalf("checkpoint blob: %v", err)
	}
	checkSealed(t, blob)

	d.crash() // the worker (and control plane) process killed with SIGKILL, a fresh one started on the same data dir
	d.mustHelmr("approve", r.ID, "--data-json", `{"ok":true}`)
	final := d.waitDone(r.ID, 120*time.Second)
	if final.Status != runs.StatusCompleted {
		t.Fatalf("restored run = %s %+v, want COMPLETED; events %s", final.Status, final.Error, systemMessages(d.events(r.ID)))
	}
	want := `{"answer":{"data":{"ok":true},"ok":true},"file":"0,1,4,9,16","squares":[0,1,4,9,16]}`
	if got := canonicalJSON(t, final.Output); got != want {
		t.Errorf("output = %s, want %s", got, want)
	}
	msgs := systemMessages(d.events(r.ID))
	for _, w := range []string{"parked: checkpoint " + ck, "queued to restore from checkpoint " + ck, "sandbox restored from checkpoint " + ck} {
		if !strings.Contains(msgs, w) {
			t.Errorf("events lack %q:\n%s", w, msgs)
		}
	}
	// Kept after the restore (for a retry, should the worker be lost), the
	// checkpoint goes once the run ended.
	waitFor(t, 10*time.Second, func() bool {
		_, err := readBlob(t, d.env, d.dataDir, ck)
		return errors.Is(err, errdefs.ErrNotFound)
	})
	t.Logf("events:\n%s", msgs)
}

// checkSealed checks that blob is a sealed checkpoint, not a runsc image,
// a QEMU migration stream or an archive in the clear: our header, none of runsc's or tar's marks, and
// bytes as random as ciphertext.
func checkSealed(t *testing.T, blob []byte) {
	t.Helper()
	if !bytes.HasPrefix(blob, []byte("HELMRCK1")) {
		t.Errorf("checkpoint blob starts %q, want the sealed header", blob[:min(16, len(blob))])
	}
	for _, mark := range []string{"gVisorSF", "runsc_version", "container_specs", "QEVM", "helmr-microvm-checkpoint", "ustar", "manifest.json", "lost+found"} {
		if bytes.Contains(blob, []byte(mark)) {
			t.Errorf("checkpoint blob contains %q in the clear", mark)
		}
	}
	if e := entropy(blob[64:]); e < 7.99 {
		t.Errorf("checkpoint blob entropy = %.4f bits/byte, want ciphertext's (> 7.99)", e)
	}
	if len(blob) < 1<<20 {
		t.Errorf("checkpoint blob is %d bytes: too small to hold a sandbox", len(blob))
	}
}

func entropy(b []byte) float64 {
	var counts [256]float64
	for _, c := range b {
		counts[c]++
	}
	var h float64
	for _, c := range counts {
		if c > 0 {
			p := c / float64(len(b))
			h -= p * math.Log2(p)
		}
	}
	return h
}

// systemMessages joins a run's system and status events, one a line.
func systemMessages(evs []runs.Event) string {
	var sb strings.Builder
	for _, ev := range evs {
		if ev.Type == runs.EventSystem || ev.Type == runs.EventStatus {
			sb.WriteString(string(ev.Data))
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// hostProcsWith lists host pids whose command line mentions s.
func hostProcsWith(s string) []string {
	var pids []string
	matches, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, filepath.Base(filepath.Dir(m)))
		}
	}
	return pids
}

// TestParkedWaitRefused: a parked run whose checkpoint cannot be restored
// fails as parked_wait, naming why, and nothing of it is restored: a
// tampered blob, a worker with another key, a worker of another tier.
func TestParkedWaitRefused(t *testing.T) {
	d := startParking(t, newCheckpointKey(t))
	refused := func(t *testing.T, runID string, want string) {
		t.Helper()
		d.mustHelmr("approve", runID, "--data-json", `{"ok":true}`)
		final := d.waitDone(runID, 120*time.Second)
		if final.Status != runs.StatusFailed || final.Error == nil || final.Error.Class != runs.ClassParkedWait || !strings.Contains(final.Error.Message, want) {
			t.Fatalf("run = %s %+v, want FAILED parked_wait naming %q", final.Status, final.Error, want)
		}
		msgs := systemMessages(d.events(runID))
		if strings.Contains(msgs, "sandbox restored") || strings.Contains(msgs, `"to":"RUNNING"}`+"\n"+`{"from":"RUNNING","to":"FAILED"`) {
			t.Errorf("a refused checkpoint was (half) restored:\n%s", msgs)
		}
		t.Logf("%s: %s", final.Error.Class, final.Error.Message)
	}

	t.Run("tampered", func(t *testing.T) {
		r, ck, _ := d.parkedRun(3)
		blob, err := readBlob(t, d.env, d.dataDir, ck)
		if err != nil {
			t.Fatal(err)
		}
		blob[len(blob)/2] ^= 0x40
		writeBlob(t, d.env, d.dataDir, ck, blob)
		d.restart()
		refused(t, r.ID, "fails authentication (tampered or damaged)")
	})

	t.Run("wrong key", func(t *testing.T) {
		r, _, _ := d.parkedRun(3)
		d.base = append(d.base, "HELMR_CHECKPOINT_ENCRYPTION_KEY="+newCheckpointKey(t))
		d.restart()
		refused(t, r.ID, "sealed under another encryption key")
	})

	t.Run("incompatible worker", func(t *testing.T) {
		r, _, _ := d.parkedRun(3)
		d.base = append(d.base, "HELMR_RUNTIME=process")
		d.restart()
		refused(t, r.ID, "tier (process) cannot restore checkpoints")
	})
}

// TestProcessTierDoesNotPark: the process tier cannot checkpoint: a run
// waiting past HELMR_PARK_AFTER keeps its sandbox, says so once in its
// events, and resumes as usual.
func TestProcessTierDoesNotPark(t *testing.T) {
	d := startDev(t, "process", "HELMR_PARK_AFTER=500ms")
	d.deploy("internal/e2e/testdata/waits")
	r := d.trigger("waits", "approval", `{"n":4}`)
	d.waitWaiting(r.ID, 60*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(systemMessages(d.events(r.ID)), "not parked") {
		if time.Now().After(deadline) {
			t.Fatalf("no \"not parked\" event after waiting; events:\n%s", systemMessages(d.events(r.ID)))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // longer than another HELMR_PARK_AFTER: still one note
	d.mustHelmr("approve", r.ID, "--data-json", `{"ok":true}`)
	final := d.waitDone(r.ID, 60*time.Second)
	if final.Status != runs.StatusCompleted || !strings.Contains(string(final.Output), `"file":"0,1,4,9"`) {
		t.Fatalf("run = %s %s %+v, want COMPLETED with its state", final.Status, final.Output, final.Error)
	}
	msgs := systemMessages(d.events(r.ID))
	if n := strings.Count(msgs, "not parked: the process tier cannot checkpoint"); n != 1 {
		t.Errorf("events say %d times that the run was not parked, want once:\n%s", n, msgs)
	}
	if strings.Contains(msgs, "parked: checkpoint") {
		t.Errorf("a process-tier run was parked:\n%s", msgs)
	}
}

// TestRemoteParkedWait parks and restores a run through the worker API: a
// remote gVisor worker (helmr worker) uploads the sealed checkpoint to
// helmr server, and downloads it to restore the run. Without a checkpoint
// key the worker refuses to start.
func TestRemoteParkedWait(t *testing.T) {
	testenv.RequireRoot(t)
	requireTier(t, "gvisor")
	testenv.BaseRootfs(t)
	bin := testenv.Binaries(t)
	tmp := t.TempDir()
	base := append(environ(t), "HELMR_CACHE_DIR="+testenv.CacheDir(), "HELMR_PROFILE="+filepath.Join(tmp, "profile.json"),
		"HELMR_WORKER_TOKEN=", "HELMR_PROJECT=", "HELMR_OWNER_TOKEN="+ownerToken, "HELMR_API_KEY="+ownerToken, "HELMR_STATE_DIR="+testenv.StateRoot(t))
	server := start(t, bin, append(slices.Clip(base), "HELMR_DATA_DIR="+filepath.Join(tmp, "cp"), "HELMR_ADDR=127.0.0.1:0", "HELMR_WORKER_TOKEN=wtok-remote-parking"),
		"Helmr control plane at ", "server")
	d := &dev{t: t, bin: bin, env: append(slices.Clip(base), "HELMR_URL="+server), dataDir: filepath.Join(tmp, "cp"), url: server, api: client.New(server, ownerToken)}
	worker := append(slices.Clip(base), "HELMR_DATA_DIR="+filepath.Join(tmp, "worker"), "HELMR_WORKER_TOKEN=wtok-remote-parking",
		"HELMR_RUNTIME=gvisor", "HELMR_PARK_AFTER=1s", "HELMR_SLOTS=1", "HELMR_WARM=0")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "helmr"), "worker", "--control-url", server)
	cmd.Env = worker
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "needs HELMR_CHECKPOINT_ENCRYPTION_KEY") {
		t.Errorf("helmr worker that parks, without a key = %v %q, want a refusal naming the setting", err, out)
	}
	start(t, bin, append(worker, "HELMR_CHECKPOINT_ENCRYPTION_KEY="+newCheckpointKey(t)),
		"Helmr worker leasing runs from ", "worker", "--control-url", server)
	d.deploy("internal/e2e/testdata/waits")
	r, ck, _ := d.parkedRun(5)
	blob, err := readBlob(t, d.env, filepath.Join(tmp, "cp"), ck)
	if err != nil {
		t.Fatalf("the control plane's blob of %s: %v", ck, err)
	}
	checkSealed(t, blob)
	d.mustHelmr("approve", r.ID, "--data-json", `{"ok":true}`)
	final := d.waitDone(r.ID, 120*time.Second)
	want := `{"answer":{"data":{"ok":true},"ok":true},"file":"0,1,4,9,16","squares":[0,1,4,9,16]}`
	if final.Status != runs.StatusCompleted || canonicalJSON(t, final.Output) != want {
		t.Fatalf("restored run = %s %s %+v, want COMPLETED with %s; events:\n%s", final.Status, final.Output, final.Error, want, systemMessages(d.events(r.ID)))
	}
}

// TestParkedTimer: a timer longer than HELMR_PARK_AFTER parks the run; the
// control plane fires the timer without a worker, the run is restored and
// finishes within its maxDuration (2s of running time; the wait is 3s).
func TestParkedTimer(t *testing.T) {
	d := startParking(t, newCheckpointKey(t))
	r := d.trigger("waits", "timer", `{}`)
	final := d.waitDone(r.ID, 120*time.Second)
	msgs := systemMessages(d.events(r.ID))
	if final.Status != runs.StatusCompleted {
		t.Fatalf("run = %s %+v, want COMPLETED; events:\n%s", final.Status, final.Error, msgs)
	}
	var out struct {
		ElapsedMs float64 `json:"elapsedMs"`
	}
	if err := json.Unmarshal(final.Output, &out); err != nil || out.ElapsedMs < 3000 {
		t.Errorf("output = %s (%v), want elapsedMs >= 3000", final.Output, err)
	}
	for _, w := range []string{"parked: checkpoint ", "COMPLETED: queued to restore", "sandbox restored from checkpoint "} {
		if !strings.Contains(msgs, w) {
			t.Errorf("events lack %q:\n%s", w, msgs)
		}
	}
}
