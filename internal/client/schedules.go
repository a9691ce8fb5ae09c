package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/helmr/helmr/internal/schedules"
)

// ScheduleRequest is the body of a schedule's creation (every field but
// Active) or update (the non-nil fields; see UpdateSchedule).
type ScheduleRequest struct {
	Task             string `json:"task,omitempty"`
	Cron             string `json:"cron,omitempty"`
	Timezone         string `json:"timezone,omitempty"`
	ExternalID       string `json:"externalId,omitempty"`
	DeduplicationKey string `json:"deduplicationKey,omitempty"`
	Active           *bool  `json:"active,omitempty"`
}

// CreateSchedule creates an imperative schedule in project/env, or
// updates the one holding req's deduplication key (created=false).
func (c *Client) CreateSchedule(ctx context.Context, project, env string, req ScheduleRequest) (schedules.Schedule, bool, error) {
	var s schedules.Schedule
	st, err := c.do(ctx, http.MethodPost, "/v1/schedules", scope(project, env), req, &s)
	return s, st == http.StatusCreated, err
}

// ListSchedules returns a page of project/env's schedules.
func (c *Client) ListSchedules(ctx context.Context, project, env string, f schedules.Filter) (schedules.Page, error) {
	q := scope(project, env)
	for k, v := range map[string]string{"task": f.TaskID, "type": string(f.Type), "cursor": f.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var p schedules.Page
	_, err := c.do(ctx, http.MethodGet, "/v1/schedules", q, nil, &p)
	return p, err
}

// GetSchedule returns a schedule.
func (c *Client) GetSchedule(ctx context.Context, id string) (schedules.Schedule, error) {
	var s schedules.Schedule
	_, err := c.do(ctx, http.MethodGet, "/v1/schedules/"+url.PathEscape(id), nil, nil, &s)
	return s, err
}

// UpdateSchedule changes an imperative schedule: fields holds the fields
// to change ("task", "cron", "timezone", "externalId").
func (c *Client) UpdateSchedule(ctx context.Context, id string, fields map[string]string) (schedules.Schedule, error) {
	var s schedules.Schedule
	_, err := c.do(ctx, http.MethodPatch, "/v1/schedules/"+url.PathEscape(id), nil, fields, &s)
	return s, err
}

// DeleteSchedule deletes an imperative schedule.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/schedules/"+url.PathEscape(id), nil, nil, nil)
	return err
}

// SetScheduleActive activates or deactivates a schedule.
func (c *Client) SetScheduleActive(ctx context.Context, id string, active bool) (schedules.Schedule, error) {
	verb := "/deactivate"
	if active {
		verb = "/activate"
	}
	var s schedules.Schedule
	_, err := c.do(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(id)+verb, nil, nil, &s)
	return s, err
}
