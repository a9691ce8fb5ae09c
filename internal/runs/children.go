package runs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

// Child runs: a task triggers runs of other tasks (or its own) from
// inside its run, through the adapter's tasks.* API. A child is an
// ordinary run of the parent's project environment that names its parent
// (ParentID) and the root of its tree (RootID). A parent that waits for
// its children (triggerAndWait, batchTriggerAndWait) waits on a waitpoint
// of kind "runs" that completes, with the children's results in order,
// once every one of them has ended; so the parking of waits applies: the
// parent's sandbox is checkpointed and its slot freed while the children
// run. Cancelling a run cancels its unfinished children, and theirs.

// ChildWaits is what child runs need of the waitpoint service.
type ChildWaits interface {
	// CreateChildWait creates the waitpoint that parent waits on for n
	// children, idempotent under key (a repeat returns the first), and
	// returns its id.
	CreateChildWait(ctx context.Context, parent Run, key string, n int) (string, error)
	// CompleteChildWait completes it with data (the children's results).
	// Completing it again with the same data, or completing a waitpoint
	// canceled meanwhile, is no error.
	CompleteChildWait(ctx context.Context, id string, data json.RawMessage) error
}

// Limits of child runs.
const (
	// MaxBatch is the most children one call triggers.
	MaxBatch = 500
	// MaxDepth is the deepest a tree of runs grows (the root is depth 1).
	MaxDepth = 10
	// MaxChildKeyLength bounds a child's idempotency key (the stored key
	// is scoped by the parent's id).
	MaxChildKeyLength = 200
)

// ChildOptions are a child's run options, as the adapter sends them.
// Durations are Go-style ("90s", "1h"); Delay may also be an RFC 3339
// time to start at.
type ChildOptions struct {
	// IdempotencyKey is scoped to the parent run: a repeat by the same
	// parent (a retried attempt, say) returns the same child.
	IdempotencyKey    string   `json:"idempotencyKey,omitempty"`
	IdempotencyKeyTTL string   `json:"idempotencyKeyTTL,omitempty"`
	Tags              []string `json:"tags,omitempty"`
	Queue             string   `json:"queue,omitempty"`
	ConcurrencyKey    string   `json:"concurrencyKey,omitempty"`
	Priority          int      `json:"priority,omitempty"`
	Delay             string   `json:"delay,omitempty"`
	TTL               string   `json:"ttl,omitempty"`
	// Secrets binds the child task's declared secrets (name →
	// "vault:NAME"); absent, the child inherits the parent's bindings of
	// the same names.
	Secrets map[string]string `json:"secrets,omitempty"`
}

// ChildItem is one child to trigger.
type ChildItem struct {
	TaskID  string          `json:"taskId"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Options ChildOptions    `json:"options,omitzero"`
}

// ChildrenRequest triggers children of a run; with Wait, the parent will
// wait for all of them.
type ChildrenRequest struct {
	Items []ChildItem `json:"items"`
	Wait  bool        `json:"wait,omitempty"`
}

// ChildRun is one triggered child; Created is false for the repeat of an
// idempotency key.
type ChildRun struct {
	ID      string `json:"id"`
	TaskID  string `json:"taskId"`
	Created bool   `json:"created"`
}

// ChildrenResult is what TriggerChildren made: the children in the
// request's order and, with Wait, the waitpoint to wait on.
type ChildrenResult struct {
	Runs        []ChildRun `json:"runs"`
	WaitpointID string     `json:"waitpointId,omitempty"`
}

// ChildResult is how one child ended, as its parent sees it: the data of
// a completed children's waitpoint is a JSON array of these, in order.
type ChildResult struct {
	OK     bool            `json:"ok"`
	ID     string          `json:"id"`
	TaskID string          `json:"taskId"`
	Status Status          `json:"status"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// ResultOf is a finished run's result for its parent.
func ResultOf(r Run) ChildResult {
	res := ChildResult{OK: r.Status == StatusCompleted, ID: r.ID, TaskID: r.TaskID, Status: r.Status}
	if res.OK {
		res.Output = r.Output
		if len(res.Output) == 0 {
			res.Output = json.RawMessage("null")
		}
		return res
	}
	res.Error = r.Error
	if res.Error == nil {
		res.Error = &Error{Message: "the run ended " + string(r.Status)}
	}
	return res
}

// TriggerChildren triggers req's items as children of run parentID, which
// must be under way. The children are made in order; if one cannot be
// (a bad payload, an unknown task), those made by this call are canceled
// and the error names the item. With req.Wait it also makes the waitpoint
// that completes when all of them have ended (at once, if they have).
func (s *Service) TriggerChildren(ctx context.Context, parentID string, req ChildrenRequest) (ChildrenResult, error) {
	if len(req.Items) == 0 {
		return ChildrenResult{}, errdefs.Invalidf("no runs to trigger")
	}
	if len(req.Items) > MaxBatch {
		return ChildrenResult{}, errdefs.Invalidf("a batch triggers at most %d runs, got %d", MaxBatch, len(req.Items))
	}
	if req.Wait && s.ChildWaits == nil {
		return ChildrenResult{}, errdefs.Invalidf("this control plane cannot wait for child runs (it keeps no waitpoints)")
	}
	parent, err := s.store.GetRun(ctx, parentID)
	if err != nil {
		return ChildrenResult{}, err
	}
	if parent.Status != StatusRunning && parent.Status != StatusWaiting {
		return ChildrenResult{}, fmt.Errorf("run %s is %s: only a running run triggers children: %w", parentID, parent.Status, errdefs.ErrConflict)
	}
	if err := s.checkDepth(ctx, parent); err != nil {
		return ChildrenResult{}, err
	}
	root := parent.RootID
	if root == "" {
		root = parent.ID
	}
	var out ChildrenResult
	var made []string
	for i, it := range req.Items {
		r, created, err := s.triggerChild(ctx, parent, root, it)
		if err != nil {
			s.undoChildren(ctx, made)
			if len(req.Items) > 1 {
				err = fmt.Errorf("item %d (task %q): %w", i, it.TaskID, err)
			}
			return ChildrenResult{}, err
		}
		if created {
			made = append(made, r.ID)
		}
		out.Runs = append(out.Runs, ChildRun{ID: r.ID, TaskID: r.TaskID, Created: created})
	}
	ids := make([]string, len(out.Runs))
	for i, c := range out.Runs {
		ids[i] = c.ID
	}
	if len(made) > 0 {
		verb := "triggered"
		if req.Wait {
			verb = "triggered and waits for"
		}
		if err := s.Note(ctx, parent.ID, SystemData{
			Message: fmt.Sprintf("%s %d child run(s): %s", verb, len(ids), strings.Join(ids, ", ")),
			Attrs:   map[string]string{"children": strings.Join(ids, ",")},
		}); err != nil {
			s.log.Warn("note a run's children", "run_id", parent.ID, "err", err)
		}
	}
	if !req.Wait {
		return out, nil
	}
	wp, err := s.ChildWaits.CreateChildWait(ctx, parent, childWaitKey(parent.ID, ids), len(ids))
	if err != nil {
		return ChildrenResult{}, fmt.Errorf("make the waitpoint for run %s's children: %w", parent.ID, err)
	}
	if err := s.store.LinkChildWait(ctx, wp, ids); err != nil {
		return ChildrenResult{}, err
	}
	out.WaitpointID = wp
	// A child (of an idempotency key, or a quick one) may have ended
	// before the link: its end found nothing to complete.
	if err := s.settleChildWait(ctx, wp); err != nil {
		return ChildrenResult{}, err
	}
	return out, nil
}

// checkDepth refuses a child of a run at MaxDepth.
func (s *Service) checkDepth(ctx context.Context, parent Run) error {
	depth := 1
	for p := parent; p.ParentID != "" && depth < MaxDepth; {
		depth++
		next, err := s.store.GetRun(ctx, p.ParentID)
		if errors.Is(err, errdefs.ErrNotFound) {
			break
		}
		if err != nil {
			return err
		}
		p = next
	}
	if depth >= MaxDepth {
		return errdefs.Invalidf("run %s is %d levels deep: a tree of runs is at most %d deep", parent.ID, depth, MaxDepth)
	}
	return nil
}

// childWaitKey makes the waitpoint of one parent's wait for the same
// children the same waitpoint: a retried attempt that triggers them again
// under their idempotency keys waits on what the first attempt waited on.
func childWaitKey(parentID string, ids []string) string {
	h := sha256.Sum256([]byte(strings.Join(ids, ",")))
	return "children:" + parentID + ":" + hex.EncodeToString(h[:16])
}

// triggerChild triggers one child of parent.
func (s *Service) triggerChild(ctx context.Context, parent Run, root string, it ChildItem) (Run, bool, error) {
	o := it.Options
	if strings.TrimSpace(it.TaskID) == "" {
		return Run{}, false, errdefs.Invalidf("a child run needs a task id")
	}
	req := TriggerRequest{
		Project: parent.Project, Env: parent.Env, TaskID: it.TaskID, Payload: it.Payload,
		Secrets: o.Secrets, Queue: o.Queue, ConcurrencyKey: o.ConcurrencyKey, Priority: o.Priority, Tags: o.Tags,
		ParentID: parent.ID, RootID: root,
	}
	if o.IdempotencyKey != "" {
		if len(o.IdempotencyKey) > MaxChildKeyLength {
			return Run{}, false, errdefs.Invalidf("idempotencyKey is longer than %d characters", MaxChildKeyLength)
		}
		req.IdempotencyKey = parent.ID + ":" + o.IdempotencyKey
	}
	if err := parseChildTimes(o, &req); err != nil {
		return Run{}, false, err
	}
	if req.Secrets == nil && len(parent.Secrets) > 0 {
		task, err := s.tasks.GetTask(ctx, parent.Project, parent.Env, it.TaskID)
		if err == nil {
			for name := range task.Spec.Secrets {
				if src, ok := parent.Secrets[name]; ok {
					if req.Secrets == nil {
						req.Secrets = map[string]string{}
					}
					req.Secrets[name] = src
				}
			}
		}
	}
	r, created, err := s.Trigger(ctx, req)
	if err != nil {
		return Run{}, false, err
	}
	if !created && r.ParentID != parent.ID {
		return Run{}, false, fmt.Errorf("idempotency key %q holds run %s, which is not a child of run %s: %w", req.IdempotencyKey, r.ID, parent.ID, errdefs.ErrConflict)
	}
	return r, created, nil
}

// parseChildTimes reads a child's delay (a duration or a time), ttl and
// idempotency key ttl.
func parseChildTimes(o ChildOptions, into *TriggerRequest) error {
	if o.Delay != "" {
		if d, err := time.ParseDuration(o.Delay); err == nil {
			into.Delay = d
		} else if t, terr := time.Parse(time.RFC3339Nano, o.Delay); terr == nil {
			into.StartAt = t
		} else {
			return errdefs.Invalidf("delay %q: want a duration (\"90s\", \"1h\") or an RFC 3339 time", o.Delay)
		}
	}
	for _, f := range []struct {
		name, v string
		to      *time.Duration
	}{{"ttl", o.TTL, &into.TTL}, {"idempotencyKeyTTL", o.IdempotencyKeyTTL, &into.IdempotencyKeyTTL}} {
		if f.v == "" {
			continue
		}
		d, err := time.ParseDuration(f.v)
		if err != nil {
			return errdefs.Invalidf("%s %q: want a duration (\"10m\", \"24h\")", f.name, f.v)
		}
		*f.to = d
	}
	return nil
}

// undoChildren cancels the children a failed batch made.
func (s *Service) undoChildren(ctx context.Context, ids []string) {
	for _, id := range ids {
		if _, err := s.Cancel(context.WithoutCancel(ctx), id); err != nil {
			s.log.Warn("cancel a child of a failed batch", "run_id", id, "err", err)
		}
	}
}

// settleChildWait completes waitpoint id with its runs' results once all
// of them have ended.
func (s *Service) settleChildWait(ctx context.Context, id string) error {
	rs, err := s.store.ChildWaitRuns(ctx, id)
	if err != nil || len(rs) == 0 {
		return err
	}
	results := make([]ChildResult, len(rs))
	for i, r := range rs {
		if !r.Status.Terminal() {
			return nil
		}
		results[i] = ResultOf(r)
	}
	data, err := json.Marshal(results)
	if err != nil {
		return fmt.Errorf("encode the results of waitpoint %s: %w", id, err)
	}
	return s.ChildWaits.CompleteChildWait(ctx, id, data)
}

// childEnded completes the waits that child r's end completes.
func (s *Service) childEnded(ctx context.Context, r Run) {
	if r.ParentID == "" || s.ChildWaits == nil {
		return
	}
	wps, err := s.store.ChildWaitsOf(ctx, r.ID)
	if err != nil {
		s.log.Warn("look up the waits for a child run", "run_id", r.ID, "err", err)
		return
	}
	for _, wp := range wps {
		if err := s.settleChildWait(ctx, wp); err != nil {
			s.log.Warn("complete the wait for child runs", "run_id", r.ID, "waitpoint", wp, "err", err)
		}
	}
}

// cancelChildren cancels r's unfinished children (Cancel cascades to
// theirs).
func (s *Service) cancelChildren(ctx context.Context, r Run) {
	cursor := ""
	for {
		page, err := s.store.ListRuns(ctx, Filter{ParentID: r.ID, Limit: 500, Cursor: cursor})
		if err != nil {
			s.log.Warn("list a canceled run's children", "run_id", r.ID, "err", err)
			return
		}
		for _, c := range page.Runs {
			if c.Status.Terminal() {
				continue
			}
			if _, err := s.Cancel(ctx, c.ID); err != nil && !errors.Is(err, errdefs.ErrConflict) {
				s.log.Warn("cancel a child of a canceled run", "run_id", c.ID, "parent_id", r.ID, "err", err)
			}
		}
		if page.NextCursor == "" {
			return
		}
		cursor = page.NextCursor
	}
}

// ChildSummary is a child as its parent's view lists it.
type ChildSummary struct {
	ID         string     `json:"id"`
	TaskID     string     `json:"taskId"`
	Status     Status     `json:"status"`
	CreatedAt  time.Time  `json:"createdAt"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
}

// MaxChildrenShown is the most children a run's view lists (the latest;
// a list of runs filtered by parent has all).
const MaxChildrenShown = 100

// Children returns run id's latest children (at most MaxChildrenShown),
// oldest first.
func (s *Service) Children(ctx context.Context, id string) ([]ChildSummary, error) {
	page, err := s.store.ListRuns(ctx, Filter{ParentID: id, Limit: MaxChildrenShown})
	if err != nil {
		return nil, err
	}
	out := make([]ChildSummary, len(page.Runs))
	for i, r := range page.Runs {
		out[len(out)-1-i] = ChildSummary{ID: r.ID, TaskID: r.TaskID, Status: r.Status, CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt}
	}
	return out, nil
}
