package e2e

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
)

// TestRetries: a task that fails twice completes on attempt 3, each retry
// after the policy's backoff (0.7 s, then 1.4 s), from a fresh sandbox on
// the same workspace, every attempt's error in the run; a task that throws
// AbortTaskRunError fails at once.
func TestRetries(t *testing.T) {
	d := startDev(t, "process")
	d.deploy("internal/e2e/testdata/flow")
	r := d.waitDone(d.trigger("flow", "flaky", `{}`).ID, 2*time.Minute)
	if r.Status != runs.StatusCompleted || string(r.Output) != `{"attempts":3}` || r.Attempt != 3 {
		t.Fatalf("flaky = %s %s attempt %d %+v; events %s", r.Status, r.Output, r.Attempt, r.Error, systemMessages(d.events(r.ID)))
	}
	if len(r.Attempts) != 2 || r.Attempts[0].Error == nil || !strings.Contains(r.Attempts[0].Error.Message, "attempt 1 fails on purpose") ||
		r.Attempts[1].Error == nil || !strings.Contains(r.Attempts[1].Error.Message, "attempt 2 fails on purpose") {
		t.Errorf("attempts = %+v, want both failures recorded", r.Attempts)
	}
	// The backoff: each attempt started no sooner than the policy says
	// after the previous one failed (0.7 s, then 1.4 s).
	var starts []time.Time
	for _, ev := range d.events(r.ID) {
		var sd runs.StatusData
		if ev.Type == runs.EventStatus && json.Unmarshal(ev.Data, &sd) == nil && sd.To == runs.StatusStarting {
			starts = append(starts, ev.Time)
		}
	}
	if len(starts) != 3 {
		t.Fatalf("%d starts, want 3", len(starts))
	}
	for i, want := range []time.Duration{700 * time.Millisecond, 1400 * time.Millisecond} {
		if gap := starts[i+1].Sub(r.Attempts[i].FinishedAt); gap < want {
			t.Errorf("attempt %d started %s after attempt %d failed, want at least %s", i+2, gap, i+1, want)
		}
	}
	msgs := systemMessages(d.events(r.ID))
	for _, w := range []string{"attempt 1 of 3 failed (task_process: attempt 1 fails on purpose); attempt 2 starts in 700ms",
		"attempt 2 of 3 failed (task_process: attempt 2 fails on purpose); attempt 3 starts in 1.4s"} {
		if !strings.Contains(msgs, w) {
			t.Errorf("events lack %q:\n%s", w, msgs)
		}
	}
	if out := d.mustHelmr("runs", "show", r.ID, "--project", "flow"); !strings.Contains(out, "attempt  3 of 3") && !strings.Contains(out, "3 of 3") {
		t.Errorf("helmr runs show = %q, want the attempts", out)
	}

	// A task with no policy of its own gets the project's (helmr.config.ts).
	def := d.waitDone(d.trigger("flow", "defaulted", `{}`).ID, time.Minute)
	if def.Status != runs.StatusCompleted || string(def.Output) != `{"attempt":2}` || def.Retry == nil || def.Retry.MaxAttempts != 2 {
		t.Errorf("defaulted = %s %s %+v, want completed on attempt 2 under the project's policy", def.Status, def.Output, def.Retry)
	}

	a := d.waitDone(d.trigger("flow", "abort", `{}`).ID, time.Minute)
	if a.Status != runs.StatusFailed || a.Attempt != 1 || len(a.Attempts) != 0 || a.Error == nil || !a.Error.NoRetry || a.Error.Name != "AbortTaskRunError" {
		t.Errorf("abort = %s attempt %d %+v, want FAILED at once, not retried", a.Status, a.Attempt, a.Error)
	}
}

// TestQueues: a queue limited to 2 never runs more than 2 of 6 runs at
// once (states sampled while they run); a concurrency key gives each
// tenant its own limit; a paused queue starts nothing until resumed.
func TestQueues(t *testing.T) {
	d := startDev(t, "process", "HELMR_SLOTS=6")
	d.deploy("internal/e2e/testdata/flow")
	var ids []string
	for range 6 {
		ids = append(ids, d.trigger("flow", "slow", `{"ms": 1500}`).ID)
	}
	maxRunning := sample(t, d, ids)
	if maxRunning != 2 {
		t.Errorf("at most %d of the limited queue's runs ran at once, want 2", maxRunning)
	}
	if out := d.mustHelmr("queues", "--project", "flow"); !strings.Contains(out, "limited") || !strings.Contains(out, "2") {
		t.Errorf("helmr queues = %q", out)
	}

	// Two tenants: each gets its own slot, so two run at once, never two
	// of one tenant.
	var tenantRuns []string
	byTenant := map[string]string{}
	for i := range 4 {
		key := []string{"acme", "globex"}[i%2]
		out := d.mustHelmr("run", "tenant", "--project", "flow", "--payload-json", `{"ms": 1200}`, "--concurrency-key", key, "--json")
		var r runs.Run
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if r.ConcurrencyKey != key || r.Queue != "per-tenant" {
			t.Errorf("run %s: queue %q key %q", r.ID, r.Queue, r.ConcurrencyKey)
		}
		tenantRuns = append(tenantRuns, r.ID)
		byTenant[r.ID] = key
	}
	overlapTenants := false
	seen := sampleFn(t, d, tenantRuns, func(running []string) {
		count := map[string]int{}
		for _, id := range running {
			count[byTenant[id]]++
		}
		if count["acme"] > 1 || count["globex"] > 1 {
			t.Errorf("two runs of one tenant ran at once: %v", running)
		}
		if count["acme"] == 1 && count["globex"] == 1 {
			overlapTenants = true
		}
	})
	if seen < 1 || !overlapTenants {
		t.Errorf("the two tenants never ran at the same time (max %d running): the key should split the limit", seen)
	}

	// Pause: nothing of the queue starts until it is resumed.
	if out := d.mustHelmr("queues", "pause", "limited", "--project", "flow"); !strings.Contains(out, "paused") {
		t.Errorf("queues pause = %q", out)
	}
	p := d.trigger("flow", "slow", `{"ms": 10}`)
	time.Sleep(2 * time.Second)
	if cur, err := d.api.GetRun(t.Context(), p.ID); err != nil || cur.Status != runs.StatusQueued {
		t.Errorf("a run of a paused queue is %s (%v), want QUEUED", cur.Status, err)
	}
	d.mustHelmr("queues", "resume", "limited", "--project", "flow")
	if r := d.waitDone(p.ID, time.Minute); r.Status != runs.StatusCompleted {
		t.Errorf("after resume: %s %+v", r.Status, r.Error)
	}
}

// sample polls runs ids until all ended and returns the most seen
// running (STARTING or RUNNING) at once.
func sample(t *testing.T, d *dev, ids []string) int {
	return sampleFn(t, d, ids, nil)
}

func sampleFn(t *testing.T, d *dev, ids []string, each func(running []string)) int {
	t.Helper()
	most := 0
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var running []string
		done := 0
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := d.api.GetRun(t.Context(), id)
				if err != nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case r.Status == runs.StatusStarting || r.Status == runs.StatusRunning:
					running = append(running, id)
				case r.Status.Terminal():
					if r.Status != runs.StatusCompleted {
						t.Errorf("run %s = %s %+v", id, r.Status, r.Error)
					}
					done++
				}
			}()
		}
		wg.Wait()
		most = max(most, len(running))
		if each != nil {
			each(running)
		}
		if done == len(ids) {
			return most
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs did not end: %d of %d done", done, len(ids))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestParkedRunFreesQueueSlot (gVisor): a run of a queue limited to one
// that waits for a human is parked, and then holds no slot: another run
// of the queue completes meanwhile; on the process tier, which cannot
// park, the waiting run keeps the slot.
func TestParkedRunFreesQueueSlot(t *testing.T) {
	requireTier(t, "gvisor")
	d := startDev(t, "gvisor", "HELMR_PARK_AFTER=1s", "HELMR_SLOTS=2", "HELMR_WARM=0", "HELMR_CHECKPOINT_ENCRYPTION_KEY="+newCheckpointKey(t))
	d.deploy("internal/e2e/testdata/flow")
	g := d.trigger("flow", "gate", `{}`)
	waitFor(t, 2*time.Minute, func() bool { return strings.Contains(systemMessages(d.events(g.ID)), "parked: checkpoint ") })
	q := d.waitDone(d.trigger("flow", "quick", `{}`).ID, 2*time.Minute)
	if q.Status != runs.StatusCompleted {
		t.Fatalf("a run of the queue while its other run is parked = %s %+v, want COMPLETED (the parked run holds no slot)", q.Status, q.Error)
	}
	d.mustHelmr("approve", g.ID, "--data-json", `{"ok":true}`)
	if final := d.waitDone(g.ID, 2*time.Minute); final.Status != runs.StatusCompleted || string(final.Output) != `{"gate":true}` {
		t.Errorf("gate after approval = %s %s %+v", final.Status, final.Output, final.Error)
	}
}

func TestWaitingRunKeepsQueueSlot(t *testing.T) {
	d := startDev(t, "process", "HELMR_SLOTS=2")
	d.deploy("internal/e2e/testdata/flow")
	g := d.trigger("flow", "gate", `{}`)
	waitFor(t, time.Minute, func() bool {
		r, err := d.api.GetRun(t.Context(), g.ID)
		return err == nil && r.Status == runs.StatusWaiting
	})
	q := d.trigger("flow", "quick", `{}`)
	time.Sleep(2 * time.Second)
	if cur, err := d.api.GetRun(t.Context(), q.ID); err != nil || cur.Status != runs.StatusQueued {
		t.Errorf("while the queue's run waits with its sandbox up, the other is %s (%v), want QUEUED", cur.Status, err)
	}
	d.mustHelmr("approve", g.ID, "--data-json", `{"ok":true}`)
	if final := d.waitDone(q.ID, time.Minute); final.Status != runs.StatusCompleted {
		t.Errorf("after the first ended: %s %+v", final.Status, final.Error)
	}
}
