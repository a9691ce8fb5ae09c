package schedules

import (
	"context"
	"errors"
	"fmt"

	"github.com/helmr/helmr/internal/deployments"
)

// ValidateManifest checks the schedules a deployment's tasks declare:
// each a cron expression in a known zone, on a task that can run. The
// problems are a deployments.ValidationError (errdefs.ErrInvalid).
func ValidateManifest(m deployments.Manifest) error {
	var ps []deployments.FieldError
	for _, t := range m.Tasks {
		if t.Schedule == nil {
			continue
		}
		if !t.HasRun {
			ps = append(ps, deployments.FieldError{Task: t.ID, Field: "schedule", Message: "a scheduled task needs run"})
		}
		if _, err := ParseSpec(t.Schedule.Cron, t.Schedule.Timezone); err != nil {
			ps = append(ps, deployments.FieldError{Task: t.ID, Field: "schedule", Message: err.Error()})
		}
	}
	if len(ps) > 0 {
		return &deployments.ValidationError{Problems: ps}
	}
	return nil
}

// SyncCurrent makes project/env's declarative schedules those its latest
// READY deployment declares. Deploying calls it when a deployment is
// READY (at once, or when its build completes); it is idempotent.
func (s *Service) SyncCurrent(ctx context.Context, project, env string) (SyncResult, error) {
	tasks, err := s.tasks.CurrentTasks(ctx, project, env)
	if err != nil {
		return SyncResult{}, fmt.Errorf("sync declared schedules of %s/%s: %w", project, env, err)
	}
	if len(tasks) == 0 {
		return SyncResult{}, nil // nothing READY yet
	}
	version := tasks[0].DeploymentVersion
	var decls []Declared
	for _, t := range tasks {
		sm := t.Spec.Schedule
		if sm == nil {
			continue
		}
		tz := sm.Timezone
		if tz == "" {
			tz = "UTC"
		}
		spec, err := ParseSpec(sm.Cron, tz)
		if err != nil {
			// Deploying validated it: a zone this host lacks, say.
			s.log.Warn("declared schedule not synced", "project", project, "env", env, "task", t.ID, "err", err)
			continue
		}
		decls = append(decls, Declared{TaskID: t.ID, Cron: sm.Cron, Timezone: tz, Next: spec.Next(s.now())})
	}
	res, err := s.store.SyncDeclared(ctx, project, env, version, decls, s.now())
	if err != nil {
		return SyncResult{}, err
	}
	if len(res.Created)+len(res.Updated)+len(res.Deleted) > 0 {
		s.log.Info("declared schedules synced", "project", project, "env", env, "deployment_version", version,
			"created", res.Created, "updated", res.Updated, "deleted", res.Deleted)
	}
	return res, nil
}

// SyncAll syncs every project environment (at start: a replica that
// stopped between a deployment and its sync leaves nothing stale).
func (s *Service) SyncAll(ctx context.Context) error {
	envs, err := s.tasks.ListEnvironments(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range envs {
		if _, err := s.SyncCurrent(ctx, e.Project, e.Env); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
