package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
)

var taskIDs = []string{"review-pr", "triage", "fix-tests", "summarize", "deploy-check"}

// seedRecord marks a database seeded for some -runs and -lines, so that
// -data can reuse it.
type seedRecord struct {
	Runs  int    `json:"runs"`
	Lines int    `json:"lines"`
	BigID string `json:"bigId"`
}

// seed fills the store with n runs of the project bench (oldest first,
// ten seconds apart, across five tasks; most completed, some failed, the
// newest still queued) and, newest of all, a run with lines log lines.
// It returns that run and whether it seeded (false: dir held a database
// seeded alike, which it reuses).
func seed(ctx context.Context, st *sqlite.Store, svc *runs.Service, n, lines int, dir string) (runs.Run, bool, error) {
	mark := filepath.Join(dir, "seeded.json")
	if data, err := os.ReadFile(mark); err == nil {
		var rec seedRecord
		if json.Unmarshal(data, &rec) == nil && rec.Runs == n && rec.Lines == lines {
			big, err := st.GetRun(ctx, rec.BigID)
			return big, false, err
		}
		return runs.Run{}, false, fmt.Errorf("%s holds a database seeded otherwise (%s): remove it or use another -data", dir, data)
	} else if !errors.Is(err, os.ErrNotExist) {
		return runs.Run{}, false, err
	}

	dep, err := st.CreateDeployment(ctx, benchDeployment())
	if err != nil {
		return runs.Run{}, false, err
	}
	base := time.Now().Add(-time.Duration(n+1) * 10 * time.Second)
	for i := 0; i < n-1; i++ {
		created := base.Add(time.Duration(i) * 10 * time.Second)
		r, _, err := st.CreateRun(ctx, runs.Run{
			Project: "bench", Env: "dev", TaskID: taskIDs[i%len(taskIDs)], DeploymentID: dep.ID, DeploymentVersion: dep.Version,
			Payload: json.RawMessage(fmt.Sprintf(`{"pr":%d,"repo":"acme/widgets","title":"Change number %d"}`, i, i)), MaxDurationSec: 600, CreatedAt: created,
		})
		if err != nil {
			return runs.Run{}, false, err
		}
		if i >= n-20 {
			continue // the newest stay queued
		}
		if err := finish(ctx, st, r, i, created); err != nil {
			return runs.Run{}, false, err
		}
		if i%10000 == 0 && i > 0 {
			fmt.Printf("  seeded %d runs\n", i)
		}
	}

	big, err := bigRun(ctx, st, svc, dep.ID, dep.Version, lines)
	if err != nil {
		return runs.Run{}, false, err
	}
	rec, _ := json.Marshal(seedRecord{Runs: n, Lines: lines, BigID: big.ID})
	return big, true, os.WriteFile(mark, rec, 0o600)
}

// finish ends run r as the i-th seeded run would have: one in eight
// failed, the others completed, a few seconds after it was created.
func finish(ctx context.Context, st *sqlite.Store, r runs.Run, i int, created time.Time) error {
	started, finished := created.Add(time.Second), created.Add(time.Duration(2+i%30)*time.Second)
	t := runs.Transition{From: []runs.Status{runs.StatusQueued}, To: runs.StatusCompleted, WorkerID: "bench-worker", Tier: "gvisor",
		StartedAt: &started, FinishedAt: &finished, Time: finished, Output: json.RawMessage(fmt.Sprintf(`{"comments":%d}`, i%7))}
	if i%8 == 3 {
		t.To, t.Output = runs.StatusFailed, nil
		t.Error = &runs.Error{Class: runs.ClassTaskProcess, Message: fmt.Sprintf("review of change %d failed", i), Stack: "Error: review failed\n    at run (tasks/review.ts:12:9)"}
	}
	_, _, err := st.Transition(ctx, r.ID, t)
	return err
}

// bigRun is the newest run: running, with lines log lines (in batches as a
// worker sends them), the last of which is lastLine(lines), then completed.
func bigRun(ctx context.Context, st *sqlite.Store, svc *runs.Service, depID string, version, lines int) (runs.Run, error) {
	r, _, err := st.CreateRun(ctx, runs.Run{Project: "bench", Env: "dev", TaskID: taskIDs[0], DeploymentID: depID, DeploymentVersion: version,
		Payload: json.RawMessage(`{"pr":0,"repo":"acme/widgets","title":"The long one"}`), MaxDurationSec: 3600})
	if err != nil {
		return runs.Run{}, err
	}
	now := time.Now()
	if _, _, err := st.Transition(ctx, r.ID, runs.Transition{From: []runs.Status{runs.StatusQueued}, To: runs.StatusRunning,
		WorkerID: "bench-worker", Tier: "gvisor", StartedAt: &now, Time: now}); err != nil {
		return runs.Run{}, err
	}
	const batch = 500
	buf := make([]runs.LogData, 0, batch)
	for i := 1; i <= lines; i++ {
		line := fmt.Sprintf("%06d reviewing src/module_%d.ts: %s", i, i%97, strings.Repeat("checked ", 1+i%9))
		if i == lines {
			line = lastLine(lines)
		}
		buf = append(buf, runs.LogData{Stream: "stdout", Line: line})
		if len(buf) == batch || i == lines {
			if err := svc.AppendLogs(ctx, r.ID, buf, time.Now()); err != nil {
				return runs.Run{}, err
			}
			buf = buf[:0]
		}
	}
	done := time.Now()
	r, _, err = st.Transition(ctx, r.ID, runs.Transition{From: []runs.Status{runs.StatusRunning}, To: runs.StatusCompleted,
		FinishedAt: &done, Time: done, Output: json.RawMessage(`{"comments":3}`)})
	return r, err
}

// lastLine is the big run's last log line, which no other line contains.
func lastLine(lines int) string {
	return fmt.Sprintf("the end of the log: line %d of %d", lines, lines)
}
