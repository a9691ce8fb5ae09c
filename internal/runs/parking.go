package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/checkpoints"
)

// CheckpointLister is what the run service needs of the checkpoint store:
// a run with a checkpoint is parked (its sandbox saved, no worker holds
// it).
type CheckpointLister interface {
	ListCheckpoints(ctx context.Context, f checkpoints.Filter) ([]checkpoints.Checkpoint, error)
}

// parked reports whether run id has a checkpoint not yet restored: its
// worker let it go, so a silent or restarted worker does not fail it.
func (s *Service) parked(ctx context.Context, id string) bool {
	ck := s.lastCheckpoint(ctx, id)
	return ck != nil && ck.RestoredAt == nil
}

// lastCheckpoint is run id's latest checkpoint (the one its lease
// restores), or nil.
func (s *Service) lastCheckpoint(ctx context.Context, id string) *checkpoints.Checkpoint {
	if s.Checkpoints == nil {
		return nil
	}
	cks, err := s.Checkpoints.ListCheckpoints(ctx, checkpoints.Filter{RunID: id})
	if err != nil {
		s.log.Warn("look up a run's checkpoints", "run_id", id, "err", err)
		return nil
	}
	if len(cks) == 0 {
		return nil
	}
	return &cks[len(cks)-1]
}

// lostState says what a run whose worker was lost kept and lost, for
// the failure's message: a sandbox's memory is gone with its worker;
// what was recorded (a checkpoint, the workspace's files on their host
// or in its last snapshot, the run's events) is not.
func (s *Service) lostState(ctx context.Context, r Run) string {
	if r.Status == StatusStarting {
		return "its sandbox was not up yet, its task not begun: nothing of the run was lost"
	}
	lost := "lost: the sandbox's memory and any output not yet reported"
	if r.Status == StatusWaiting {
		lost += ", and a checkpoint the worker may have been taking to park the run (a park is recorded only once its checkpoint is stored)"
	}
	var kept []string
	if ck := s.lastCheckpoint(ctx, r.ID); ck != nil {
		at := ck.CreatedAt.UTC().Format(time.RFC3339)
		if ck.RestoredAt == nil {
			kept = append(kept, fmt.Sprintf("checkpoint %s (parked %s on waitpoint %s), which the worker was restoring", ck.ID, at, ck.WaitpointID))
		} else {
			kept = append(kept, fmt.Sprintf("checkpoint %s (the run's memory and workspace when it parked %s on waitpoint %s)", ck.ID, at, ck.WaitpointID))
		}
	}
	if r.WorkspaceID != "" {
		kept = append(kept, fmt.Sprintf("workspace %s's files on its host, or its last snapshot should the host be gone", r.WorkspaceID))
	}
	if len(kept) == 0 {
		return lost
	}
	return lost + "; kept: " + strings.Join(kept, "; ")
}

// ReleaseSlot frees the queue slot of a WAITING run that was parked, and
// tells waiting leasers.
func (s *Service) ReleaseSlot(ctx context.Context, id string) error {
	if err := s.store.ReleaseSlot(ctx, id); err != nil {
		return err
	}
	s.broker.PublishQueue()
	return nil
}

// Note appends a system event to run id.
func (s *Service) Note(ctx context.Context, id string, note SystemData) error {
	data, _ := json.Marshal(note)
	if _, err := s.store.AppendEvents(ctx, id, []NewEvent{{Type: EventSystem, Time: s.now(), Data: data}}); err != nil {
		return fmt.Errorf("note on run %s: %w", id, err)
	}
	s.broker.Publish(id)
	return nil
}

// Requeue moves a parked WAITING run whose wait is over back to QUEUED,
// with note, for a worker to lease and restore.
func (s *Service) Requeue(ctx context.Context, id string, note SystemData) (Run, error) {
	if err := s.Note(ctx, id, note); err != nil {
		return Run{}, err
	}
	now := s.now()
	r, _, err := s.store.Transition(ctx, id, Transition{From: []Status{StatusWaiting}, To: StatusQueued, Time: now, Due: &now})
	if err != nil {
		return Run{}, err
	}
	s.broker.Publish(id)
	s.broker.PublishQueue()
	return r, nil
}

// Unpark queues for restore every run parked on waitpoint wpID, which
// resolved with status; it returns how many it queued.
func (s *Service) Unpark(ctx context.Context, wpID, status string) (int, error) {
	if s.Checkpoints == nil {
		return 0, nil
	}
	cks, err := s.Checkpoints.ListCheckpoints(ctx, checkpoints.Filter{WaitpointID: wpID})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ck := range cks {
		if ck.RestoredAt != nil {
			continue // the run was restored from it already
		}
		r, err := s.store.GetRun(ctx, ck.RunID)
		if err != nil || r.Status != StatusWaiting {
			continue
		}
		_, err = s.Requeue(ctx, r.ID, SystemData{
			Message: fmt.Sprintf("waitpoint %s %s: queued to restore from checkpoint %s", wpID, status, ck.ID),
			Attrs:   map[string]string{"waitpoint": wpID, "status": status, "checkpoint": ck.ID},
		})
		if err != nil {
			s.log.Warn("queue a parked run for restore", "run_id", r.ID, "checkpoint", ck.ID, "err", err)
			continue
		}
		n++
	}
	return n, nil
}
