package runs

import (
	"context"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workers"
)

// Heartbeat records that a worker is alive, with its capabilities.
func (s *Service) Heartbeat(ctx context.Context, workerID string, caps workers.Capabilities) error {
	if workerID == "" {
		return fmt.Errorf("heartbeat without a worker id: %w", errdefs.ErrInvalid)
	}
	return s.workers.UpsertWorker(ctx, workers.Worker{ID: workerID, Capabilities: caps, LastSeen: s.now()})
}

// WorkerLost reports whether worker id has not reported within WorkerTTL
// (or never did): what it took will not be answered.
func (s *Service) WorkerLost(ctx context.Context, id string) (bool, error) {
	ws, err := s.workers.ListWorkers(ctx, s.now().Add(-s.WorkerTTL))
	if err != nil {
		return false, err
	}
	for _, w := range ws {
		if w.ID == id {
			return false, nil
		}
	}
	return true, nil
}

// FailLostRuns fails, as guest_runtime, every started run whose worker has
// not sent a heartbeat (or asked for work) within the service's WorkerTTL:
// its sandbox's state is unknown, and nothing would ever finish it.
func (s *Service) FailLostRuns(ctx context.Context) (int, error) {
	ws, err := s.workers.ListWorkers(ctx, s.now().Add(-s.WorkerTTL))
	if err != nil {
		return 0, err
	}
	live := make(map[string]bool, len(ws))
	for _, w := range ws {
		live[w.ID] = true
	}
	return s.failStarted(ctx, func(r Run) (string, bool) {
		if live[r.WorkerID] {
			return "", false
		}
		return fmt.Sprintf("worker %s stopped reporting (no heartbeat for %s) while the run was %s; %s", r.WorkerID, s.WorkerTTL, r.Status, s.lostState(ctx, r)), true
	})
}

// WatchWorkers calls FailLostRuns and MoveStrandedRuns every interval
// until ctx ends.
func (s *Service) WatchWorkers(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.FailLostRuns(ctx); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("fail runs of lost workers", "err", err)
			}
		} else if n > 0 {
			s.log.Warn("failed runs whose worker stopped reporting", "runs", n)
		}
		if n, err := s.MoveStrandedRuns(ctx); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("move runs of workspaces whose host is gone", "err", err)
			}
		} else if n > 0 {
			s.log.Info("moved runs of workspaces whose host is gone to any worker", "runs", n)
		}
	}
}
