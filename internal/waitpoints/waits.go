package waitpoints

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// BeginWait records that run runID waits on waitpoint id (of the run's
// project env) and moves the run to WAITING, with the waitpoint in a system
// event. It returns the waitpoint, which may already be resolved.
func (s *Service) BeginWait(ctx context.Context, runID, id string) (Waitpoint, error) {
	r, err := s.runs.Get(ctx, runID)
	if err != nil {
		return Waitpoint{}, err
	}
	w, err := s.store.GetWaitpoint(ctx, id)
	if err != nil {
		return Waitpoint{}, err
	}
	if w.Project != r.Project || w.Env != r.Env {
		return Waitpoint{}, fmt.Errorf("waitpoint %s in %s/%s: %w", id, r.Project, r.Env, errdefs.ErrNotFound)
	}
	if w, err = s.store.MarkWaited(ctx, id, s.now()); err != nil {
		return Waitpoint{}, err
	}
	attrs := map[string]string{"waitpoint": w.ID, "kind": string(w.Kind)}
	if w.DisplayText != "" {
		attrs["displayText"] = w.DisplayText
	}
	if w.TimeoutAt != nil {
		attrs["timeoutAt"] = w.TimeoutAt.Format(time.RFC3339Nano)
	}
	if _, err := s.runs.WaitOn(ctx, runID, runs.SystemData{Message: describe(w), Attrs: attrs}); err != nil {
		return Waitpoint{}, err
	}
	return w, nil
}

func describe(w Waitpoint) string {
	switch w.Kind {
	case KindHuman:
		return fmt.Sprintf("waiting for a human (%s): %s", w.ID, w.DisplayText)
	case KindTimer:
		return fmt.Sprintf("waiting until %s (%s)", w.TimeoutAt.Format(time.RFC3339), w.ID)
	case KindRuns:
		return fmt.Sprintf("waiting for child runs (%s): %s", w.ID, w.DisplayText)
	}
	msg := "waiting for token " + w.ID
	if w.TimeoutAt != nil {
		msg += " (times out at " + w.TimeoutAt.Format(time.RFC3339) + ")"
	}
	return msg
}

// EndWait moves run runID, which waited on waitpoint id, back to RUNNING
// with a system event saying how the waitpoint resolved.
func (s *Service) EndWait(ctx context.Context, runID, id string) error {
	w, err := s.store.GetWaitpoint(ctx, id)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("waitpoint %s %s: the run resumes", w.ID, w.Status)
	if w.Status == StatusWaiting {
		msg = fmt.Sprintf("the run stopped waiting on waitpoint %s: it resumes", w.ID)
	}
	_, err = s.runs.Resume(ctx, runID, runs.SystemData{Message: msg,
		Attrs: map[string]string{"waitpoint": w.ID, "status": string(w.Status)}})
	return err
}

// Await returns waitpoint id once it is no longer WAITING, or as it is
// after max (still WAITING). A waitpoint whose time has come is expired
// here, on time, without waiting for Watch.
func (s *Service) Await(ctx context.Context, id string, max time.Duration) (Waitpoint, error) {
	changed, unsubscribe := s.subscribe(id)
	defer unsubscribe()
	deadline := time.NewTimer(max)
	defer deadline.Stop()
	for {
		w, err := s.store.GetWaitpoint(ctx, id)
		if err != nil {
			return Waitpoint{}, err
		}
		if w.Status != StatusWaiting {
			return w, nil
		}
		// Another control-plane replica may resolve it: re-read now and
		// then, or when it is due.
		wake := time.Second
		if w.TimeoutAt != nil {
			d := w.TimeoutAt.Sub(s.now())
			if d <= 0 {
				if _, err := s.expire(ctx, w); err != nil && !errors.Is(err, errdefs.ErrConflict) {
					return Waitpoint{}, err
				}
				continue
			}
			wake = min(wake, d)
		}
		t := time.NewTimer(wake)
		select {
		case <-changed:
		case <-t.C:
		case <-deadline.C:
			t.Stop()
			return w, nil
		case <-ctx.Done():
			t.Stop()
			return Waitpoint{}, ctx.Err()
		}
		t.Stop()
	}
}

// expire resolves a due waitpoint: a timer completes, anything else times
// out.
func (s *Service) expire(ctx context.Context, w Waitpoint) (Waitpoint, error) {
	r := Resolution{Status: StatusTimedOut, Time: s.now()}
	if w.Kind == KindTimer {
		r = Resolution{Status: StatusCompleted, Data: []byte("null"), Time: s.now()}
	}
	return s.resolve(ctx, w.ID, r)
}

// Expire resolves every waitpoint whose time has come; it returns how many.
func (s *Service) Expire(ctx context.Context) (int, error) {
	n := 0
	for {
		due, err := s.store.DueWaitpoints(ctx, s.now(), 100)
		if err != nil {
			return n, err
		}
		for _, w := range due {
			if _, err := s.expire(ctx, w); err != nil && !errors.Is(err, errdefs.ErrConflict) {
				return n, err
			}
			n++
		}
		if len(due) < 100 {
			return n, nil
		}
	}
}

// Watch calls Expire every interval until ctx ends: timers fire and
// tokens time out even when no worker waits on them.
func (s *Service) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.Expire(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("expire due waitpoints", "err", err)
		}
	}
}

// subscribe returns a channel signalled when waitpoint id resolves in this
// process.
func (s *Service) subscribe(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.subs[id] == nil {
		s.subs[id] = map[chan struct{}]struct{}{}
	}
	s.subs[id][ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.subs[id], ch)
		if len(s.subs[id]) == 0 {
			delete(s.subs, id)
		}
		s.mu.Unlock()
	}
}

func (s *Service) publish(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// CreateForRun creates a waitpoint of run runID (its task's ctx.wait), in
// the run's project env. The run must be under way.
func (s *Service) CreateForRun(ctx context.Context, runID string, req CreateRequest) (Waitpoint, error) {
	r, err := s.runs.Get(ctx, runID)
	if err != nil {
		return Waitpoint{}, err
	}
	if r.Status != runs.StatusRunning && r.Status != runs.StatusWaiting {
		return Waitpoint{}, fmt.Errorf("run %s is %s: only a running run creates waitpoints: %w", runID, r.Status, errdefs.ErrConflict)
	}
	req.Project, req.Env, req.RunID = r.Project, r.Env, r.ID
	w, _, err := s.Create(ctx, req)
	return w, err
}
