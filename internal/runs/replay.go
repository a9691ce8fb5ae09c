package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

// Replay and bulk actions. A replay is a new run of the task an earlier
// run ran, on the task's latest deployment, with the original's payload
// (or an edited one), secret bindings and run options, linked to it by
// ReplayOf. Bulk actions cancel or replay the runs of one project
// environment that a filter selects, a page at a time.

// ReplayOptions change what a replay takes from its original. A nil field
// keeps the original's value; the others are not taken from it.
type ReplayOptions struct {
	// Payload replaces the original's payload (nil: the original's). It
	// goes through a trigger's checks: the task's declared input and the
	// payload secret scan.
	Payload json.RawMessage
	// Secrets replaces the original's bindings (nil: the original's).
	Secrets        map[string]string
	Tags           *[]string
	Queue          *string
	ConcurrencyKey *string
	Priority       *int

	// WorkspaceID attaches the replay to a workspace; empty: a new one
	// (the original's may be in use, and a replay starts afresh).
	WorkspaceID string
	// IdempotencyKey, Delay, StartAt and TTL are as for a trigger: an
	// original's are about its own start, so a replay has none unless
	// given.
	IdempotencyKey string
	Delay          time.Duration
	StartAt        time.Time
	TTL            time.Duration
}

// Replay starts a new run of orig's task in orig's project environment,
// as o says. Callers authorize orig (its project environment) first.
// created is false when o.IdempotencyKey returned an earlier run.
func (s *Service) Replay(ctx context.Context, orig Run, o ReplayOptions) (Run, bool, error) {
	if orig.Kind == KindBuild {
		return Run{}, false, fmt.Errorf("run %s builds deployment %s: only task runs replay (deploy again to rebuild): %w", orig.ID, orig.DeploymentID, errdefs.ErrInvalid)
	}
	req := TriggerRequest{
		Project: orig.Project, Env: orig.Env, TaskID: orig.TaskID, ReplayOf: orig.ID,
		Payload: orig.Payload, Secrets: orig.Secrets,
		Queue: orig.Queue, ConcurrencyKey: orig.ConcurrencyKey, Priority: orig.Priority, Tags: orig.Tags,
		WorkspaceID: o.WorkspaceID, IdempotencyKey: o.IdempotencyKey, Delay: o.Delay, StartAt: o.StartAt, TTL: o.TTL,
	}
	if o.Payload != nil {
		req.Payload = o.Payload
	}
	if o.Secrets != nil {
		req.Secrets = o.Secrets
	}
	if o.Tags != nil {
		req.Tags = *o.Tags
	}
	if o.Queue != nil {
		req.Queue = *o.Queue
	}
	if o.ConcurrencyKey != nil {
		req.ConcurrencyKey = *o.ConcurrencyKey
	}
	if o.Priority != nil {
		req.Priority = *o.Priority
	}
	r, created, err := s.Trigger(ctx, req)
	if err != nil {
		return Run{}, false, fmt.Errorf("replay run %s: %w", orig.ID, err)
	}
	return r, created, nil
}

// Bulk limits: one call acts on at most MaxBulk runs, DefaultBulkLimit
// unless it says.
const (
	MaxBulk          = 1000
	DefaultBulkLimit = 100
)

// BulkFilter selects the runs of one project environment a bulk action
// applies to: the task runs matching every field given, newest first, a
// page of Limit at a time (Cursor: the NextCursor of the previous page),
// or the runs named by IDs that match the other fields.
type BulkFilter struct {
	Project, Env string
	TaskID       string
	Status       Status
	Tag, Queue   string
	Since, Until time.Time
	IDs          []string
	Limit        int
	Cursor       string
	// DryRun reports what would be done and does nothing.
	DryRun bool
}

// Validate reports a filter a bulk action refuses (errdefs.ErrInvalid):
// one that selects nothing in particular acts on nothing.
func (f BulkFilter) Validate() error {
	switch {
	case f.Project == "" || f.Env == "":
		return errdefs.Invalidf("a bulk action names its project environment")
	case f.Status != "" && !f.Status.Valid():
		return errdefs.Invalidf("unknown status %q (one of QUEUED, STARTING, RUNNING, WAITING, COMPLETED, FAILED, TIMED_OUT, CANCELED, EXPIRED)", f.Status)
	case f.Tag != "" && !ValidQueueName(f.Tag):
		return errdefs.Invalidf("tag %q: 1 to 128 letters, digits and _.:/- (starting with a letter or digit)", f.Tag)
	case f.Queue != "" && !ValidQueueName(f.Queue):
		return errdefs.Invalidf("queue %q: 1 to 128 letters, digits and _.:/- (starting with a letter or digit)", f.Queue)
	case !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until):
		return errdefs.Invalidf("since (%s) is not before until (%s)", f.Since.Format(time.RFC3339), f.Until.Format(time.RFC3339))
	case f.Limit < 0 || f.Limit > MaxBulk:
		return errdefs.Invalidf("limit is 1 to %d runs per call, got %d", MaxBulk, f.Limit)
	case len(f.IDs) > MaxBulk:
		return errdefs.Invalidf("ids names at most %d runs per call, got %d", MaxBulk, len(f.IDs))
	case len(f.IDs) > 0 && f.Cursor != "":
		return errdefs.Invalidf("a cursor pages through a filter's runs; ids are all taken at once")
	case f.TaskID == "" && f.Status == "" && f.Tag == "" && f.Queue == "" && f.Since.IsZero() && f.Until.IsZero() && len(f.IDs) == 0:
		return errdefs.Invalidf("a bulk action needs a filter (task, status, tag, queue, since, until or ids); to act on every run, give since")
	}
	seen := map[string]bool{}
	for _, id := range f.IDs {
		if id == "" || seen[id] {
			return errdefs.Invalidf("ids: %q is empty or given twice", id)
		}
		seen[id] = true
	}
	return nil
}

// matches reports whether r fits f's fields other than IDs.
func (f BulkFilter) matches(r Run) bool {
	return (r.Kind == "" || r.Kind == KindTask) &&
		(f.TaskID == "" || r.TaskID == f.TaskID) &&
		(f.Status == "" || r.Status == f.Status) &&
		(f.Tag == "" || slices.Contains(r.Tags, f.Tag)) &&
		(f.Queue == "" || r.Queue == f.Queue) &&
		(f.Since.IsZero() || !r.CreatedAt.Before(f.Since)) &&
		(f.Until.IsZero() || r.CreatedAt.Before(f.Until))
}

// What a bulk action did to a run (BulkItem.Action).
const (
	BulkCanceled    = "canceled"
	BulkReplayed    = "replayed"
	BulkWouldCancel = "would_cancel" // a dry run's
	BulkWouldReplay = "would_replay" // a dry run's
	BulkSkipped     = "skipped"      // left alone: Reason says why
	BulkFailed      = "failed"       // the action was refused: Reason says why
	BulkNotFound    = "not_found"    // an id of no run of the environment
)

// BulkItem is what a bulk action did to one run.
type BulkItem struct {
	RunID string `json:"runId"`
	// Status is the run's status when the action found it.
	Status Status `json:"status,omitempty"`
	Action string `json:"action"`
	// NewRunID is the replay's id (replayed).
	NewRunID string `json:"newRunId,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// BulkResult answers a bulk action: the runs it matched on this call and
// what it did to each, counted by action. More is true when more runs
// match: the next call passes NextCursor (a filter's next page).
type BulkResult struct {
	Matched    int            `json:"matched"`
	Counts     map[string]int `json:"counts"`
	Runs       []BulkItem     `json:"runs"`
	More       bool           `json:"more"`
	NextCursor string         `json:"nextCursor,omitempty"`
	DryRun     bool           `json:"dryRun,omitempty"`
}

func (b *BulkResult) add(it BulkItem) {
	b.Runs = append(b.Runs, it)
	b.Counts[it.Action]++
}

// BulkCancel cancels the runs f selects (Service.Cancel on each). Runs
// that already ended are skipped, not errors.
func (s *Service) BulkCancel(ctx context.Context, f BulkFilter) (BulkResult, error) {
	return s.bulk(ctx, f, func(r Run) BulkItem {
		it := BulkItem{RunID: r.ID, Status: r.Status}
		switch {
		case r.Status.Terminal():
			it.Action, it.Reason = BulkSkipped, "already "+string(r.Status)
		case f.DryRun:
			it.Action = BulkWouldCancel
		default:
			_, err := s.Cancel(ctx, r.ID)
			switch {
			case err == nil:
				it.Action = BulkCanceled
			case errors.Is(err, errdefs.ErrConflict):
				it.Action, it.Reason = BulkSkipped, err.Error() // it ended meanwhile
			default:
				it.Action, it.Reason = BulkFailed, s.itemReason(r.ID, err)
			}
		}
		return it
	})
}

// BulkReplay replays the runs f selects, each as o says (Replay). A run
// whose replay is refused (its payload no longer fits the task's input,
// the task is gone) is counted as failed with the reason; the others go
// on. o may not name a workspace or an idempotency key: those belong to
// one run.
func (s *Service) BulkReplay(ctx context.Context, f BulkFilter, o ReplayOptions) (BulkResult, error) {
	if o.WorkspaceID != "" || o.IdempotencyKey != "" {
		return BulkResult{}, errdefs.Invalidf("a bulk replay takes no workspaceId or idempotencyKey: each belongs to one run (replay that run alone)")
	}
	return s.bulk(ctx, f, func(r Run) BulkItem {
		it := BulkItem{RunID: r.ID, Status: r.Status}
		if f.DryRun {
			it.Action = BulkWouldReplay
			return it
		}
		nr, _, err := s.Replay(ctx, r, o)
		if err != nil {
			it.Action, it.Reason = BulkFailed, s.itemReason(r.ID, err)
			return it
		}
		it.Action, it.NewRunID = BulkReplayed, nr.ID
		return it
	})
}

// itemReason is what a bulk answer says of a run whose action failed: the
// domain's message for an error of a kind, and no internals otherwise
// (those are logged).
func (s *Service) itemReason(id string, err error) string {
	if errdefs.Kind(err) != nil {
		return err.Error()
	}
	s.log.Error("bulk action on a run", "run_id", id, "err", err)
	return "internal error"
}

// bulk selects f's runs and applies act to each, in order.
func (s *Service) bulk(ctx context.Context, f BulkFilter, act func(Run) BulkItem) (BulkResult, error) {
	if err := f.Validate(); err != nil {
		return BulkResult{}, err
	}
	res := BulkResult{Counts: map[string]int{}, Runs: []BulkItem{}, DryRun: f.DryRun}
	if len(f.IDs) > 0 {
		for _, id := range f.IDs {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			r, err := s.store.GetRun(ctx, id)
			switch {
			case errors.Is(err, errdefs.ErrNotFound) || err == nil && (r.Project != f.Project || r.Env != f.Env):
				// Another environment's run is not found, as a missing one.
				res.add(BulkItem{RunID: id, Action: BulkNotFound})
				continue
			case err != nil:
				return res, fmt.Errorf("bulk action: get run %s: %w", id, err)
			case !f.matches(r):
				res.add(BulkItem{RunID: id, Status: r.Status, Action: BulkSkipped, Reason: "does not match the filter"})
				continue
			}
			res.Matched++
			res.add(act(r))
		}
		return res, nil
	}
	limit := f.Limit
	if limit == 0 {
		limit = DefaultBulkLimit
	}
	page, err := s.store.ListRuns(ctx, Filter{
		Project: f.Project, Env: f.Env, Kind: KindTask, TaskID: f.TaskID, Status: f.Status,
		Tag: f.Tag, Queue: f.Queue, Since: f.Since, Until: f.Until, Limit: limit, Cursor: f.Cursor,
	})
	if err != nil {
		return res, fmt.Errorf("bulk action: %w", err)
	}
	for _, r := range page.Runs {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		res.Matched++
		res.add(act(r))
	}
	res.More, res.NextCursor = page.NextCursor != "", page.NextCursor
	return res, nil
}
