package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// ReplayBody changes what a replay takes from its original: the body of
// POST /v1/runs/{id}/replay, and the overrides of a bulk replay. An
// absent field keeps the original's value (payload, secrets, tags, queue,
// concurrencyKey, priority); the rest are a trigger's.
type ReplayBody struct {
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

// options reads b as the domain's replay options.
func (b ReplayBody) options() (runs.ReplayOptions, error) {
	o := runs.ReplayOptions{
		Payload: b.Payload, Secrets: b.Secrets, Tags: b.Tags, Queue: b.Queue, ConcurrencyKey: b.ConcurrencyKey,
		Priority: b.Priority, WorkspaceID: b.WorkspaceID, IdempotencyKey: b.IdempotencyKey,
	}
	var t runs.TriggerRequest
	if err := parseRunOptions(TriggerRequest{Delay: b.Delay, TTL: b.TTL}, &t); err != nil {
		return o, err
	}
	o.Delay, o.StartAt, o.TTL = t.Delay, t.StartAt, t.TTL
	return o, nil
}

// BulkRequest is the body of POST /v1/runs/bulk/cancel and (with
// Overrides) /v1/runs/bulk/replay: a filter of the request's project
// environment's runs, a limit and a cursor.
type BulkRequest struct {
	Task   string          `json:"task,omitempty"`
	Status string          `json:"status,omitempty"`
	Tag    string          `json:"tag,omitempty"`
	Queue  string          `json:"queue,omitempty"`
	Since  json.RawMessage `json:"since,omitempty"`
	Until  json.RawMessage `json:"until,omitempty"`
	IDs    []string        `json:"ids,omitempty"`
	Limit  int             `json:"limit,omitempty"`
	Cursor string          `json:"cursor,omitempty"`
	DryRun bool            `json:"dryRun,omitempty"`
	// Overrides (bulk replay only) are the replays' edits.
	Overrides *ReplayBody `json:"overrides,omitempty"`
}

// maxBulkBody bounds a bulk request: a payload and a thousand ids.
const maxBulkBody = runs.MaxPayloadBytes + 256<<10

// filter reads req as a filter of project/env's runs.
func (req BulkRequest) filter(project, env string) (runs.BulkFilter, error) {
	f := runs.BulkFilter{Project: project, Env: env, TaskID: req.Task, Status: runs.Status(req.Status),
		Tag: req.Tag, Queue: req.Queue, IDs: req.IDs, Limit: req.Limit, Cursor: req.Cursor, DryRun: req.DryRun}
	for _, t := range []struct {
		name string
		raw  json.RawMessage
		to   *time.Time
	}{{"since", req.Since, &f.Since}, {"until", req.Until, &f.Until}} {
		if t.raw == nil {
			continue // absent
		}
		// Given, it is a time: "" and null are mistakes, not "unbounded".
		var s string
		if err := json.Unmarshal(t.raw, &s); err != nil {
			return f, errdefs.Invalidf("%s is not an RFC 3339 time string (2026-01-02T15:04:05Z)", t.name)
		}
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return f, errdefs.Invalidf("%s %q is not an RFC 3339 time (2026-01-02T15:04:05Z)", t.name, s)
		}
		*t.to = v
	}
	return f, f.Validate()
}

func (s *Server) replayRun(w http.ResponseWriter, r *http.Request) error {
	orig, err := s.visibleRun(r)
	if err != nil {
		return err
	}
	var body ReplayBody
	if err := decodeOptionalJSON(w, r, runs.MaxPayloadBytes+64<<10, &body); err != nil {
		return err
	}
	o, err := body.options()
	if err != nil {
		return err
	}
	run, created, err := s.cfg.Runs.Replay(r.Context(), orig, o)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	return writeJSON(w, status, run)
}

func (s *Server) bulkCancel(w http.ResponseWriter, r *http.Request) error {
	f, overrides, err := s.bulkRequest(w, r)
	if err != nil {
		return err
	}
	if overrides != nil {
		return errdefs.Invalidf("overrides are a bulk replay's edits: a bulk cancel takes none")
	}
	res, err := s.cfg.Runs.BulkCancel(r.Context(), f)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

func (s *Server) bulkReplay(w http.ResponseWriter, r *http.Request) error {
	f, overrides, err := s.bulkRequest(w, r)
	if err != nil {
		return err
	}
	var o runs.ReplayOptions
	if overrides != nil {
		if o, err = overrides.options(); err != nil {
			return err
		}
	}
	res, err := s.cfg.Runs.BulkReplay(r.Context(), f, o)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// bulkRequest reads a bulk action's scope (project and env query
// parameters) and body.
func (s *Server) bulkRequest(w http.ResponseWriter, r *http.Request) (runs.BulkFilter, *ReplayBody, error) {
	project, env, err := scope(r)
	if err != nil {
		return runs.BulkFilter{}, nil, err
	}
	var req BulkRequest
	if err := decodeJSON(w, r, maxBulkBody, &req); err != nil {
		return runs.BulkFilter{}, nil, err
	}
	f, err := req.filter(project, env)
	return f, req.Overrides, err
}
