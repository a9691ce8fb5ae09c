package schedules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// Bounds of what a schedule carries.
const (
	MaxExternalIDLength = 256
	MaxKeyLength        = 256
)

// DefaultLease is how long a claimed tick stays with its claimer before
// another replica may trigger it again (with the same idempotency key).
const DefaultLease = 30 * time.Second

// Triggerer starts runs: the subset of runs.Service schedules need.
type Triggerer interface {
	Trigger(ctx context.Context, req runs.TriggerRequest) (runs.Run, bool, error)
}

// Tasks reads deployed tasks: the subset of deployments.Store schedules
// need.
type Tasks interface {
	GetTask(ctx context.Context, project, env, taskID string) (deployments.Task, error)
	CurrentTasks(ctx context.Context, project, env string) ([]deployments.Task, error)
	ListEnvironments(ctx context.Context) ([]deployments.Environment, error)
}

// Service validates and records schedules, syncs declarative ones with
// deployments, and fires their ticks (Tick, Run).
type Service struct {
	// Lease is how long a claimed tick stays with this replica before
	// another may take it over (default DefaultLease). Set before use.
	Lease time.Duration

	store Store
	tasks Tasks
	runs  Triggerer
	log   *slog.Logger
	now   func() time.Time
}

// NewService wires a schedule service.
func NewService(store Store, tasks Tasks, runs Triggerer, log *slog.Logger) *Service {
	return &Service{Lease: DefaultLease, store: store, tasks: tasks, runs: runs, log: log,
		now: func() time.Time { return time.Now().UTC() }}
}

// SetClock replaces the service's clock (tests).
func (s *Service) SetClock(now func() time.Time) { s.now = now }

// CreateRequest asks for an imperative schedule.
type CreateRequest struct {
	Project  string
	Env      string
	TaskID   string
	Cron     string
	Timezone string
	// ExternalID reaches each run's payload.
	ExternalID string
	// DeduplicationKey: a schedule of the project env that holds it is
	// updated instead of a new one made.
	DeduplicationKey string
	// Inactive creates the schedule deactivated.
	Inactive bool
}

// Create makes an imperative schedule, or updates the one holding the
// request's deduplication key (created=false).
func (s *Service) Create(ctx context.Context, req CreateRequest) (Schedule, bool, error) {
	if req.Timezone == "" {
		req.Timezone = "UTC"
	}
	spec, err := s.check(ctx, req.Project, req.Env, req.TaskID, req.Cron, req.Timezone, req.ExternalID)
	if err != nil {
		return Schedule{}, false, err
	}
	if len(req.DeduplicationKey) > MaxKeyLength {
		return Schedule{}, false, errdefs.Invalidf("deduplicationKey is longer than %d characters", MaxKeyLength)
	}
	for range 3 {
		if req.DeduplicationKey != "" {
			cur, err := s.store.GetScheduleByKey(ctx, req.Project, req.Env, req.DeduplicationKey)
			if err == nil {
				up, err := s.store.UpdateSchedule(ctx, cur.ID, func(sc *Schedule) error {
					s.apply(sc, spec, req.TaskID, req.Cron, req.Timezone, req.ExternalID)
					s.setActive(sc, spec, !req.Inactive)
					return nil
				})
				if errors.Is(err, errdefs.ErrNotFound) {
					continue // deleted meanwhile: create it
				}
				return up, false, err
			}
			if !errors.Is(err, errdefs.ErrNotFound) {
				return Schedule{}, false, err
			}
		}
		now := s.now()
		sc := Schedule{Project: req.Project, Env: req.Env, TaskID: req.TaskID, Type: TypeImperative,
			Cron: req.Cron, Timezone: req.Timezone, ExternalID: req.ExternalID, DeduplicationKey: req.DeduplicationKey,
			CreatedAt: now, UpdatedAt: now}
		s.setActive(&sc, spec, !req.Inactive)
		got, err := s.store.CreateSchedule(ctx, sc)
		if errors.Is(err, errdefs.ErrConflict) && req.DeduplicationKey != "" {
			continue // a concurrent create took the key: update that one
		}
		return got, err == nil, err
	}
	return Schedule{}, false, fmt.Errorf("create schedule with deduplication key %q: concurrent changes: %w", req.DeduplicationKey, errdefs.ErrConflict)
}

// check validates what a schedule names: a task deployed in the project
// env, its cron expression and zone, its external id.
func (s *Service) check(ctx context.Context, project, env, taskID, cron, tz, externalID string) (Spec, error) {
	if !deployments.ValidName(taskID) {
		return Spec{}, errdefs.Invalidf("task %q is not a valid task id", taskID)
	}
	if len(externalID) > MaxExternalIDLength {
		return Spec{}, errdefs.Invalidf("externalId is longer than %d characters", MaxExternalIDLength)
	}
	spec, err := ParseSpec(cron, tz)
	if err != nil {
		return Spec{}, err
	}
	if _, err := s.tasks.GetTask(ctx, project, env, taskID); errors.Is(err, errdefs.ErrNotFound) {
		return Spec{}, errdefs.Invalidf("task %q is not deployed in %s/%s", taskID, project, env)
	} else if err != nil {
		return Spec{}, fmt.Errorf("look up task %q: %w", taskID, err)
	}
	return spec, nil
}

// apply sets a schedule's task, cron, zone and external id; a new cron or
// zone moves its next tick (from now: ticks of the old one do not fire).
func (s *Service) apply(sc *Schedule, spec Spec, taskID, cron, tz, externalID string) {
	moved := sc.Cron != cron || sc.Timezone != tz
	sc.TaskID, sc.Cron, sc.Timezone, sc.ExternalID, sc.UpdatedAt = taskID, cron, tz, externalID, s.now()
	if moved && sc.Active {
		next := spec.Next(s.now())
		sc.NextRunAt = &next
	}
}

// setActive activates (the next tick from now: ticks missed while
// inactive do not fire) or deactivates a schedule; already so, it stays.
func (s *Service) setActive(sc *Schedule, spec Spec, active bool) {
	if sc.Active == active && (active == (sc.NextRunAt != nil)) {
		return
	}
	sc.Active, sc.UpdatedAt, sc.NextRunAt = active, s.now(), nil
	if active {
		next := spec.Next(s.now())
		sc.NextRunAt = &next
	}
}

// Get returns a schedule.
func (s *Service) Get(ctx context.Context, id string) (Schedule, error) {
	return s.store.GetSchedule(ctx, id)
}

// List returns a page of a project env's schedules.
func (s *Service) List(ctx context.Context, f Filter) (Page, error) {
	if f.Type != "" && f.Type != TypeDeclarative && f.Type != TypeImperative {
		return Page{}, errdefs.Invalidf("unknown schedule type %q (DECLARATIVE or IMPERATIVE)", f.Type)
	}
	return s.store.ListSchedules(ctx, f)
}

// UpdateRequest changes an imperative schedule; nil fields stay as they
// are.
type UpdateRequest struct {
	TaskID     *string
	Cron       *string
	Timezone   *string
	ExternalID *string
}

// Update changes an imperative schedule's task, cron, zone or external
// id. A declarative schedule is changed by deploying: errdefs.ErrConflict.
func (s *Service) Update(ctx context.Context, id string, req UpdateRequest) (Schedule, error) {
	return s.store.UpdateSchedule(ctx, id, func(sc *Schedule) error {
		if sc.Type == TypeDeclarative {
			return declaredErr(*sc, "updated")
		}
		task, cron, tz, ext := pick(req.TaskID, sc.TaskID), pick(req.Cron, sc.Cron), pick(req.Timezone, sc.Timezone), pick(req.ExternalID, sc.ExternalID)
		if tz == "" {
			tz = "UTC"
		}
		spec, err := s.check(ctx, sc.Project, sc.Env, task, cron, tz, ext)
		if err != nil {
			return err
		}
		s.apply(sc, spec, task, cron, tz, ext)
		return nil
	})
}

func pick(v *string, cur string) string {
	if v == nil {
		return cur
	}
	return *v
}

func declaredErr(sc Schedule, what string) error {
	return errdefs.Conflictf("schedule %s is declared by task %q of deployment %d: it is %s by deploying (activate and deactivate still apply)", sc.ID, sc.TaskID, sc.DeploymentVersion, what)
}

// SetActive activates or deactivates a schedule, declarative ones too (a
// redeploy keeps the flag).
func (s *Service) SetActive(ctx context.Context, id string, active bool) (Schedule, error) {
	return s.store.UpdateSchedule(ctx, id, func(sc *Schedule) error {
		spec, err := ParseSpec(sc.Cron, sc.Timezone)
		if err != nil {
			return err
		}
		s.setActive(sc, spec, active)
		return nil
	})
}

// Delete removes an imperative schedule; a declarative one goes with the
// deployment that no longer declares it (errdefs.ErrConflict).
func (s *Service) Delete(ctx context.Context, id string) error {
	sc, err := s.store.GetSchedule(ctx, id)
	if err != nil {
		return err
	}
	if sc.Type == TypeDeclarative {
		return declaredErr(sc, "removed")
	}
	return s.store.DeleteSchedule(ctx, id)
}
