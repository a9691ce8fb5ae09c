package runs

import (
	"context"
	"time"

	"github.com/helmr/helmr/internal/workers"
)

// WorkerState is a worker as operators see it: what it last reported,
// whether it is live, and the runs it holds.
type WorkerState struct {
	workers.Worker
	// Live: seen within the service's WorkerTTL.
	Live bool `json:"live"`
	// Held are the started runs (STARTING, RUNNING, or WAITING and not
	// parked) leased to it, newest first: its slots in use.
	Held []HeldRun `json:"runs"`
}

// HeldRun is a run a worker holds.
type HeldRun struct {
	ID        string     `json:"id"`
	Project   string     `json:"project"`
	Env       string     `json:"env"`
	TaskID    string     `json:"taskId"`
	Status    Status     `json:"status"`
	Tier      string     `json:"tier,omitempty"`
	StartedAt *time.Time `json:"startedAt,omitempty"`
}

// Workers returns the workers seen since since, by id, each with the
// runs it holds.
func (s *Service) Workers(ctx context.Context, since time.Time) ([]WorkerState, error) {
	ws, err := s.workers.ListWorkers(ctx, since)
	if err != nil {
		return nil, err
	}
	held := map[string][]HeldRun{}
	for _, st := range []Status{StatusStarting, StatusRunning, StatusWaiting} {
		cursor := ""
		for {
			page, err := s.store.ListRuns(ctx, Filter{Status: st, Limit: 500, Cursor: cursor})
			if err != nil {
				return nil, err
			}
			for _, r := range page.Runs {
				if r.WorkerID == "" || (st == StatusWaiting && s.parked(ctx, r.ID)) {
					continue
				}
				held[r.WorkerID] = append(held[r.WorkerID], HeldRun{ID: r.ID, Project: r.Project, Env: r.Env, TaskID: r.TaskID,
					Status: r.Status, Tier: r.Tier, StartedAt: r.StartedAt})
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
	}
	live := s.now().Add(-s.WorkerTTL)
	out := make([]WorkerState, 0, len(ws))
	for _, w := range ws {
		out = append(out, WorkerState{Worker: w, Live: !w.LastSeen.Before(live), Held: held[w.ID]})
	}
	return out, nil
}
