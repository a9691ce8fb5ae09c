package runs_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
	"github.com/helmr/helmr/internal/workers"
)

func flowService(t *testing.T, tasks ...deployments.TaskManifest) *runs.Service {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "helmr.db"), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := runs.NewService(st, st, st, runs.NewBroker(), slog.Default())
	if _, err := st.CreateDeployment(context.Background(), deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: tasks},
		Files:    map[string][]byte{"bundles/tasks/a.mjs": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	return svc
}

func TestRunOptionsChecked(t *testing.T) {
	task := goodTask("a")
	task.Sandbox.Resources = deployments.Resources{CPU: 2, Memory: "1Gi"}
	svc := flowService(t, task)
	ctx := t.Context()
	for name, req := range map[string]runs.TriggerRequest{
		"bad queue":           {Queue: "-x"},
		"bad key":             {ConcurrencyKey: "a b"},
		"priority":            {Priority: 1001},
		"eleven tags":         {Tags: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"}},
		"duplicate tag":       {Tags: []string{"a", "a"}},
		"negative delay":      {Delay: -time.Second},
		"delay and start":     {Delay: time.Second, StartAt: time.Now().Add(time.Hour)},
		"ttl over a year":     {TTL: 400 * 24 * time.Hour},
		"key ttl, no key":     {IdempotencyKeyTTL: time.Hour},
		"more cpu":            {MachineCPU: 4},
		"more memory":         {MachineMemory: "2Gi"},
		"memory not a size":   {MachineMemory: "lots"},
		"cpu below a minimum": {MachineCPU: 0.001},
	} {
		req.Project, req.Env, req.TaskID = "p", "dev", "a"
		if _, _, err := svc.Trigger(ctx, req); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: Trigger = %v, want invalid", name, err)
		}
	}
	page, err := svc.List(ctx, runs.Filter{Project: "p"})
	if err != nil || len(page.Runs) != 0 {
		t.Fatalf("refused triggers stored runs: %v %v", page.Runs, err)
	}
	r, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a", Tags: []string{"nightly"}, Priority: 3,
		ConcurrencyKey: "acme", Delay: time.Minute, TTL: time.Hour, MachineCPU: 1, MachineMemory: "512Mi"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Queue != "task/a" || r.ConcurrencyKey != "acme" || r.Priority != 3 || r.Needs.CPU != 1 || r.Needs.MemoryBytes != 512<<20 ||
		r.AvailableAt == nil || r.ExpiresAt == nil || r.ExpiresAt.Sub(*r.AvailableAt) != time.Hour {
		t.Errorf("run = %+v", r)
	}
}

func TestRetryFollowsPolicy(t *testing.T) {
	task := goodTask("a")
	task.Retry = &runs.RetryPolicy{MaxAttempts: 2, MinTimeoutMs: 50}
	svc := flowService(t, task)
	ctx := t.Context()
	big := workers.Capabilities{CPUs: 2, MemoryBytes: 1 << 30}
	lease := func() runs.Run {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			r, err := svc.Lease(ctx, "w", big)
			if err == nil {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("nothing to lease: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, c := range []struct {
		name    string
		outcome runs.Outcome
		retried bool
	}{
		{"task error", runs.Outcome{Status: runs.StatusFailed, Error: &runs.Error{Class: runs.ClassTaskProcess, Message: "boom"}}, true},
		{"lost worker", runs.Outcome{Status: runs.StatusFailed, Error: &runs.Error{Class: runs.ClassGuestRuntime, Message: "gone"}}, true},
		{"abort", runs.Outcome{Status: runs.StatusFailed, Error: &runs.Error{Class: runs.ClassTaskProcess, Message: "no", NoRetry: true}}, false},
		{"image", runs.Outcome{Status: runs.StatusFailed, Error: &runs.Error{Class: runs.ClassImagePreparation, Message: "no node"}}, false},
		{"timeout", runs.Outcome{Status: runs.StatusTimedOut, Error: &runs.Error{Class: runs.ClassTimeout, Message: "late"}}, false},
	} {
		r, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "a"})
		if err != nil {
			t.Fatal(err)
		}
		got := lease()
		if got.ID != r.ID {
			t.Fatalf("%s: leased %s, want %s", c.name, got.ID, r.ID)
		}
		after, err := svc.Finish(ctx, r.ID, c.outcome)
		if err != nil {
			t.Fatal(err)
		}
		if c.retried != (after.Status == runs.StatusQueued) {
			t.Errorf("%s: after the first attempt %s, retried = %v", c.name, after.Status, c.retried)
		}
		if !c.retried {
			continue
		}
		if after.Attempt != 2 || len(after.Attempts) != 1 || after.Attempts[0].Error.Message != c.outcome.Error.Message {
			t.Errorf("%s: %+v", c.name, after)
		}
		// The second attempt is the last: its failure ends the run.
		if again := lease(); again.ID != r.ID {
			t.Fatalf("%s: second lease %s", c.name, again.ID)
		}
		final, err := svc.Finish(ctx, r.ID, c.outcome)
		if err != nil || final.Status != runs.StatusFailed || final.Attempt != 2 {
			t.Errorf("%s: last attempt = %s attempt %d %v", c.name, final.Status, final.Attempt, err)
		}
		evs, _ := svc.Events(ctx, r.ID, 0, 100)
		var notes []string
		for _, ev := range evs {
			if ev.Type == runs.EventSystem {
				notes = append(notes, string(ev.Data))
			}
		}
		if all := strings.Join(notes, "\n"); !strings.Contains(all, "attempt 1 of 2 failed") || !strings.Contains(all, "attempt 2 of 2 failed: no attempts left") {
			t.Errorf("%s: notes %s", c.name, all)
		}
	}
}
