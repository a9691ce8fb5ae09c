package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/helmr/helmr/internal/runs"
)

// ReplayOptions change what a replay takes from its original (the body of
// POST /v1/runs/{id}/replay, and a bulk replay's overrides). A nil field
// keeps the original's value.
type ReplayOptions struct {
	Payload        json.RawMessage   `json:"payload,omitempty"`
	Secrets        map[string]string `json:"secrets,omitempty"`
	Tags           *[]string         `json:"tags,omitempty"`
	Queue          *string           `json:"queue,omitempty"`
	ConcurrencyKey *string           `json:"concurrencyKey,omitempty"`
	Priority       *int              `json:"priority,omitempty"`
	WorkspaceID    string            `json:"workspaceId,omitempty"`
	IdempotencyKey string            `json:"idempotencyKey,omitempty"`
	Delay          string            `json:"delay,omitempty"`
	TTL            string            `json:"ttl,omitempty"`
}

// ReplayRun starts a new run of run id's task with its payload and run
// options, except those o changes; created is false when o's idempotency
// key returned an earlier replay.
func (c *Client) ReplayRun(ctx context.Context, id string, o ReplayOptions) (runs.Run, bool, error) {
	var r runs.Run
	st, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/replay", nil, o, &r)
	return r, st == http.StatusCreated, err
}

// BulkFilter selects the runs of a project environment a bulk action
// applies to (times in RFC 3339).
type BulkFilter struct {
	Task   string   `json:"task,omitempty"`
	Status string   `json:"status,omitempty"`
	Tag    string   `json:"tag,omitempty"`
	Queue  string   `json:"queue,omitempty"`
	Since  string   `json:"since,omitempty"`
	Until  string   `json:"until,omitempty"`
	IDs    []string `json:"ids,omitempty"`
	Limit  int      `json:"limit,omitempty"`
	Cursor string   `json:"cursor,omitempty"`
	DryRun bool     `json:"dryRun,omitempty"`
}

// BulkCancel cancels the runs of project/env that f selects.
func (c *Client) BulkCancel(ctx context.Context, project, env string, f BulkFilter) (runs.BulkResult, error) {
	var res runs.BulkResult
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/bulk/cancel", scope(project, env), f, &res)
	return res, err
}

// BulkReplay replays the runs of project/env that f selects, each as o
// says (nil: as its original).
func (c *Client) BulkReplay(ctx context.Context, project, env string, f BulkFilter, o *ReplayOptions) (runs.BulkResult, error) {
	body := struct {
		BulkFilter
		Overrides *ReplayOptions `json:"overrides,omitempty"`
	}{f, o}
	var res runs.BulkResult
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/bulk/replay", scope(project, env), body, &res)
	return res, err
}
