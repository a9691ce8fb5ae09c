package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/schedules"
)

// CreateScheduleRequest is the body of POST /v1/schedules.
type CreateScheduleRequest struct {
	Task     string `json:"task"`
	Cron     string `json:"cron"`
	Timezone string `json:"timezone,omitempty"`
	// ExternalID reaches each run's payload.
	ExternalID string `json:"externalId,omitempty"`
	// DeduplicationKey: creating again with the same key updates the
	// schedule that holds it (200) instead of making another (201).
	DeduplicationKey string `json:"deduplicationKey,omitempty"`
	// Active false creates it deactivated; absent or true, active.
	Active *bool `json:"active,omitempty"`
}

// UpdateScheduleRequest is the body of PATCH /v1/schedules/{id}: absent
// fields stay as they are.
type UpdateScheduleRequest struct {
	Task       *string `json:"task,omitempty"`
	Cron       *string `json:"cron,omitempty"`
	Timezone   *string `json:"timezone,omitempty"`
	ExternalID *string `json:"externalId,omitempty"`
}

func (s *Server) schedules() (*schedules.Service, error) {
	if s.cfg.Schedules == nil {
		return nil, errdefs.Unavailablef("schedules are not enabled on this server")
	}
	return s.cfg.Schedules, nil
}

func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.schedules()
	if err != nil {
		return err
	}
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	var req CreateScheduleRequest
	if err := decodeJSON(w, r, 16<<10, &req); err != nil {
		return err
	}
	sc, created, err := svc.Create(r.Context(), schedules.CreateRequest{Project: project, Env: env, TaskID: req.Task,
		Cron: req.Cron, Timezone: req.Timezone, ExternalID: req.ExternalID, DeduplicationKey: req.DeduplicationKey,
		Inactive: req.Active != nil && !*req.Active})
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	return writeJSON(w, status, sc)
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.schedules()
	if err != nil {
		return err
	}
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	limit, err := intParam(r, "limit", 50)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	page, err := svc.List(r.Context(), schedules.Filter{Project: project, Env: env, TaskID: q.Get("task"),
		Type: schedules.Type(q.Get("type")), Limit: limit, Cursor: q.Get("cursor")})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, page)
}

// visibleSchedule is the schedule a request addresses by id, if it is in
// the request's scope (else not found, as a missing one).
func (s *Server) visibleSchedule(r *http.Request) (*schedules.Service, schedules.Schedule, error) {
	svc, err := s.schedules()
	if err != nil {
		return nil, schedules.Schedule{}, err
	}
	sc, err := svc.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, schedules.Schedule{}, err
	}
	if err := authorizeObject(r.Context(), sc.Project, sc.Env, fmt.Errorf("get schedule %s: %w", sc.ID, errdefs.ErrNotFound)); err != nil {
		return nil, schedules.Schedule{}, err
	}
	return svc, sc, nil
}

func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) error {
	_, sc, err := s.visibleSchedule(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sc)
}

func (s *Server) updateSchedule(w http.ResponseWriter, r *http.Request) error {
	svc, sc, err := s.visibleSchedule(r)
	if err != nil {
		return err
	}
	var req UpdateScheduleRequest
	if err := decodeJSON(w, r, 16<<10, &req); err != nil {
		return err
	}
	sc, err = svc.Update(r.Context(), sc.ID, schedules.UpdateRequest{TaskID: req.Task, Cron: req.Cron,
		Timezone: req.Timezone, ExternalID: req.ExternalID})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sc)
}

func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	svc, sc, err := s.visibleSchedule(r)
	if err != nil {
		return err
	}
	if err := svc.Delete(r.Context(), sc.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// setScheduleActive serves POST /v1/schedules/{id}/activate and
// /deactivate.
func (s *Server) setScheduleActive(active bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		svc, sc, err := s.visibleSchedule(r)
		if err != nil {
			return err
		}
		sc, err = svc.SetActive(r.Context(), sc.ID, active)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, sc)
	}
}

// syncSchedules makes d's project env's declarative schedules those of
// its latest READY deployment. The deployment stands whatever happens:
// a failure is logged, and the next deploy or start syncs again.
func (s *Server) syncSchedules(ctx context.Context, d deployments.Deployment) {
	if s.cfg.Schedules == nil || d.Status != deployments.StatusReady {
		return
	}
	if _, err := s.cfg.Schedules.SyncCurrent(context.WithoutCancel(ctx), d.Project, d.Env); err != nil {
		s.log.Warn("sync declared schedules", "deployment_id", d.ID, "err", err)
	}
}
