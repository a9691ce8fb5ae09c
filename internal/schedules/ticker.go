package schedules

import (
	"context"
	"encoding/json"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// Payload is what a scheduled run receives, as Trigger.dev's scheduled
// tasks do.
type Payload struct {
	Type Type `json:"type"`
	// Timestamp is the tick this run is for; LastTimestamp the tick of
	// the schedule's previous run (absent for its first).
	Timestamp     time.Time  `json:"timestamp"`
	LastTimestamp *time.Time `json:"lastTimestamp,omitempty"`
	Timezone      string     `json:"timezone"`
	ScheduleID    string     `json:"scheduleId"`
	ExternalID    string     `json:"externalId,omitempty"`
	// Upcoming are the next ticks after this one.
	Upcoming []time.Time `json:"upcoming"`
}

// IdempotencyKey is the key a tick's run is triggered with: a tick that
// is triggered twice (its claimer crashed before recording the run, and
// another replica took it over) makes one run.
func IdempotencyKey(scheduleID string, tick time.Time) string {
	return "schedule:" + scheduleID + ":" + describeTick(tick)
}

const dueBatch = 100

// Tick fires every tick due now and returns how many runs it triggered.
// A tick is claimed with a compare-and-set on its schedule's row, so that
// of several replicas ticking together exactly one fires it. A schedule
// that missed several ticks (the control plane was down) fires once, for
// the latest of them.
func (s *Service) Tick(ctx context.Context) (int, error) {
	fired := 0
	for {
		now := s.now()
		due, err := s.store.DueSchedules(ctx, now, dueBatch)
		if err != nil {
			return fired, err
		}
		for _, sc := range due {
			ok, err := s.fireDue(ctx, sc, now)
			if err != nil {
				return fired, err
			}
			if ok {
				fired++
			}
		}
		if len(due) < dueBatch {
			return fired, nil
		}
	}
}

// fireDue claims one due tick of sc (or takes over its lapsed pending
// one) and fires it; ok says whether this call made a run.
func (s *Service) fireDue(ctx context.Context, sc Schedule, now time.Time) (bool, error) {
	until := now.Add(s.Lease)
	var tick time.Time
	if sc.PendingTick != nil {
		got, ok, err := s.store.RetakeTick(ctx, sc.ID, *sc.PendingTick, now, until)
		if err != nil || !ok {
			return false, err
		}
		sc, tick = got, *got.PendingTick
		s.log.Info("retrying a schedule tick whose claimer did not finish it", "schedule_id", sc.ID, "tick", tick)
	} else {
		spec, err := ParseSpec(sc.Cron, sc.Timezone)
		if err != nil {
			s.log.Warn("schedule has an unreadable cron", "schedule_id", sc.ID, "err", err)
			return false, nil
		}
		tick = spec.Latest(*sc.NextRunAt, now)
		got, ok, err := s.store.ClaimTick(ctx, sc.ID, Claim{Due: *sc.NextRunAt, Tick: tick, Next: spec.Next(tick), Until: until})
		if err != nil || !ok {
			return false, err
		}
		sc = got
	}
	return s.fire(ctx, sc, tick)
}

// fire triggers the run of a claimed tick and records it. A failure that
// retrying may cure (the store is down, say) leaves the tick pending: it
// is triggered again, with the same idempotency key, when the claim
// lapses. Any other failure (the task is no longer deployed, its input
// refuses the payload) is recorded as the schedule's last error.
func (s *Service) fire(ctx context.Context, sc Schedule, tick time.Time) (bool, error) {
	p := Payload{Type: sc.Type, Timestamp: tick, LastTimestamp: sc.LastRunAt, Timezone: sc.Timezone,
		ScheduleID: sc.ID, ExternalID: sc.ExternalID, Upcoming: []time.Time{}}
	if spec, err := ParseSpec(sc.Cron, sc.Timezone); err == nil {
		p.Upcoming = spec.Upcoming(tick, 5)
	}
	body, err := json.Marshal(p)
	if err != nil {
		return false, err
	}
	r, created, err := s.runs.Trigger(ctx, runs.TriggerRequest{Project: sc.Project, Env: sc.Env, TaskID: sc.TaskID,
		Payload: body, IdempotencyKey: IdempotencyKey(sc.ID, tick), Secrets: s.bindings(ctx, sc)})
	o := Outcome{Tick: tick, RunID: r.ID, Time: s.now()}
	if err != nil {
		if !permanent(err) {
			s.log.Warn("trigger a scheduled run; the tick is retried when its claim lapses", "schedule_id", sc.ID, "tick", tick, "err", err)
			return false, nil
		}
		s.log.Warn("scheduled run not triggered", "schedule_id", sc.ID, "task", sc.TaskID, "tick", tick, "err", err)
		o.Error = err.Error()
	}
	if _, ferr := s.store.FinishTick(ctx, sc.ID, o); ferr != nil {
		return false, ferr
	}
	if err == nil {
		s.log.Info("schedule fired", "schedule_id", sc.ID, "task", sc.TaskID, "tick", tick, "run_id", r.ID, "created", created)
	}
	return err == nil && created, nil
}

// bindings binds each secret the task declares to the vault secret of the
// same name in the schedule's project env: nobody is there to bind them
// when a tick fires. (A task that is gone binds nothing: the trigger
// says it is gone.)
func (s *Service) bindings(ctx context.Context, sc Schedule) map[string]string {
	t, err := s.tasks.GetTask(ctx, sc.Project, sc.Env, sc.TaskID)
	if err != nil || len(t.Spec.Secrets) == 0 {
		return nil
	}
	out := make(map[string]string, len(t.Spec.Secrets))
	for name := range t.Spec.Secrets {
		out[name] = "vault:" + name
	}
	return out
}

// permanent reports whether triggering failed for a reason a retry does
// not cure: the request's own fault, not the system's.
func permanent(err error) bool {
	switch errdefs.Kind(err) {
	case errdefs.ErrNotFound, errdefs.ErrInvalid, errdefs.ErrConflict, errdefs.ErrTooLarge, errdefs.ErrForbidden:
		return true
	}
	return false
}

// Run syncs every environment's declarative schedules, then fires due
// ticks until ctx ends: it wakes at the earliest next tick, and at least
// every interval (a schedule made through another replica).
func (s *Service) Run(ctx context.Context, interval time.Duration) {
	if err := s.SyncAll(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("sync declared schedules", "err", err)
	}
	for {
		if _, err := s.Tick(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("fire due schedules", "err", err)
		}
		wait := interval
		if next, err := s.store.NextTick(ctx); err == nil && next != nil {
			wait = min(wait, next.Sub(s.now()))
		}
		wait = max(wait, 10*time.Millisecond)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
