package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// TriggerRequest is the body of POST /v1/tasks/{id}/runs.
type TriggerRequest struct {
	Payload        json.RawMessage   `json:"payload"`
	IdempotencyKey string            `json:"idempotencyKey,omitempty"`
	Secrets        map[string]string `json:"secrets,omitempty"`
	// WorkspaceID attaches the run to an existing workspace; empty: a new one.
	WorkspaceID string `json:"workspaceId,omitempty"`
	// ReplayOf names the run (of the same task) this one replays.
	ReplayOf string `json:"replayOf,omitempty"`
	// Run options (runs/flow.go). Durations are Go-style ("90s", "1h");
	// delay may also be an RFC 3339 time to start at.
	Queue             string   `json:"queue,omitempty"`
	ConcurrencyKey    string   `json:"concurrencyKey,omitempty"`
	Priority          int      `json:"priority,omitempty"`
	Tags              []string `json:"tags,omitempty"`
	Delay             string   `json:"delay,omitempty"`
	TTL               string   `json:"ttl,omitempty"`
	IdempotencyKeyTTL string   `json:"idempotencyKeyTTL,omitempty"`
	// Machine sizes the run's sandbox within the task's declared limits.
	Machine *struct {
		CPU    float64 `json:"cpu,omitempty"`
		Memory string  `json:"memory,omitempty"`
	} `json:"machine,omitempty"`
}

// parseRunOptions reads a trigger's delay (a duration or a time), ttl and
// idempotency key ttl.
func parseRunOptions(req TriggerRequest, into *runs.TriggerRequest) error {
	if req.Delay != "" {
		if d, err := time.ParseDuration(req.Delay); err == nil {
			into.Delay = d
		} else if t, terr := time.Parse(time.RFC3339, req.Delay); terr == nil {
			into.StartAt = t
		} else {
			return errdefs.Invalidf("delay %q: want a duration (\"90s\", \"1h\") or an RFC 3339 time", req.Delay)
		}
	}
	for _, f := range []struct {
		name, v string
		to      *time.Duration
	}{{"ttl", req.TTL, &into.TTL}, {"idempotencyKeyTTL", req.IdempotencyKeyTTL, &into.IdempotencyKeyTTL}} {
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

func (s *Server) triggerRun(w http.ResponseWriter, r *http.Request) error {
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	var req TriggerRequest
	if err := decodeJSON(w, r, runs.MaxPayloadBytes+64<<10, &req); err != nil {
		return err
	}
	key := req.IdempotencyKey
	if h := r.Header.Get("Idempotency-Key"); h != "" {
		if key != "" && key != h {
			return errdefs.Invalidf("the Idempotency-Key header and body field differ")
		}
		key = h
	}
	treq := runs.TriggerRequest{
		Project: project, Env: env, TaskID: r.PathValue("id"), Payload: req.Payload, IdempotencyKey: key,
		Secrets: req.Secrets, WorkspaceID: req.WorkspaceID, ReplayOf: req.ReplayOf,
		Queue: req.Queue, ConcurrencyKey: req.ConcurrencyKey, Priority: req.Priority, Tags: req.Tags,
	}
	if req.Machine != nil {
		treq.MachineCPU, treq.MachineMemory = req.Machine.CPU, req.Machine.Memory
	}
	if err := parseRunOptions(req, &treq); err != nil {
		return err
	}
	run, created, err := s.cfg.Runs.Trigger(r.Context(), treq)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	return writeJSON(w, status, run)
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) error {
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, err := intParam(r, "limit", 50)
	if err != nil {
		return err
	}
	if q.Has("status") && !runs.Status(q.Get("status")).Valid() {
		return errdefs.Invalidf("unknown status %q (one of QUEUED, STARTING, RUNNING, WAITING, COMPLETED, FAILED, TIMED_OUT, CANCELED, EXPIRED)", q.Get("status"))
	}
	kind := q.Get("kind")
	if kind != "" && kind != runs.KindTask && kind != runs.KindBuild {
		return errdefs.Invalidf("unknown kind %q (task or build)", kind)
	}
	since, err := timeParam(r, "since")
	if err != nil {
		return err
	}
	until, err := timeParam(r, "until")
	if err != nil {
		return err
	}
	page, err := s.cfg.Runs.List(r.Context(), runs.Filter{
		Project: project, Env: env, TaskID: q.Get("task"), Status: runs.Status(q.Get("status")), Kind: kind,
		Since: since, Until: until, IDPrefix: q.Get("id"), Limit: limit, Cursor: q.Get("cursor"),
		Tag: q.Get("tag"), Queue: q.Get("queue"), ParentID: q.Get("parent"),
	})
	if err != nil {
		return err
	}
	if page.Runs == nil {
		page.Runs = []runs.Run{}
	}
	return writeJSON(w, http.StatusOK, page)
}

// visibleRun is the run a request addresses by id, if it is in the
// request's scope (else not found).
func (s *Server) visibleRun(r *http.Request) (runs.Run, error) {
	run, err := s.cfg.Runs.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return runs.Run{}, err
	}
	if err := authorizeRun(r.Context(), run); err != nil {
		return runs.Run{}, err
	}
	return run, nil
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) error {
	run, err := s.visibleRun(r)
	if err != nil {
		return err
	}
	v, err := s.runView(r, run)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.visibleRun(r); err != nil {
		return err
	}
	run, err := s.cfg.Runs.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, run)
}

// EventPage is one page of a run's events.
type EventPage struct {
	Events []runs.Event `json:"events"`
	// NextCursor is the seq to pass as after for the next page.
	NextCursor int64 `json:"nextCursor"`
	// Done is true when the run is finished and no events follow.
	Done bool `json:"done"`
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) error {
	after, err := afterParam(r)
	if err != nil {
		return err
	}
	// A page of events may be larger than other lists: a log of tens of
	// thousands of lines loads in a few requests (the console's run page).
	limit := 1000
	if v := r.URL.Query().Get("limit"); r.URL.Query().Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > runs.MaxEventsPage {
			return errdefs.Invalidf("limit must be an integer from 0 to %d", runs.MaxEventsPage)
		}
		limit = n
	}
	id := r.PathValue("id")
	run, err := s.visibleRun(r)
	if err != nil {
		return err
	}
	evs, err := s.cfg.Runs.Events(r.Context(), id, after, limit)
	if err != nil {
		return err
	}
	page := EventPage{Events: evs, NextCursor: after}
	if evs == nil {
		page.Events = []runs.Event{}
	}
	if n := len(evs); n > 0 {
		page.NextCursor = evs[n-1].Seq
	}
	page.Done = run.Status.Terminal() && page.NextCursor >= run.LastSeq
	return writeJSON(w, http.StatusOK, page)
}

// timeParam reads the optional RFC 3339 time query parameter name.
func timeParam(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, errdefs.Invalidf("%s %q is not an RFC 3339 time (2026-01-02T15:04:05Z)", name, v)
	}
	return t, nil
}

// afterParam reads the optional ?after= event cursor.
func afterParam(r *http.Request) (int64, error) {
	q := r.URL.Query()
	if !q.Has("after") {
		return 0, nil
	}
	return cursorParam(q.Get("after"))
}

func cursorParam(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errdefs.Invalidf("cursor %q must be a non-negative event sequence number", v)
	}
	return n, nil
}

// streamEvents serves a run's events as server-sent events. Each event's id
// is its seq, so a client resumes with Last-Event-ID (or ?after=). The
// stream ends after the run's final event.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	after, err := afterParam(r)
	if cur := r.Header.Get("Last-Event-ID"); cur != "" {
		after, err = cursorParam(cur)
	}
	if err != nil {
		return err
	}
	if _, err := s.visibleRun(r); err != nil {
		return err
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return fmt.Errorf("streaming unsupported")
	}
	changed, unsubscribe := s.cfg.Runs.Broker().Subscribe(id)
	defer unsubscribe()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	return s.pump(w, flusher, r, id, after, changed)
}

func (s *Server) pump(w http.ResponseWriter, f http.Flusher, r *http.Request, id string, after int64, changed <-chan struct{}) error {
	ctx := r.Context()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		run, err := s.cfg.Runs.Get(ctx, id)
		if err != nil {
			return nil // the client went away or the store failed; the stream just ends
		}
		evs, err := s.cfg.Runs.Events(ctx, id, after, 500)
		if err != nil {
			return nil
		}
		for _, ev := range evs {
			data, _ := json.Marshal(ev)
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, data); err != nil {
				return nil
			}
			after = ev.Seq
		}
		f.Flush()
		if len(evs) == 500 {
			continue
		}
		if run.Status.Terminal() && after >= run.LastSeq {
			fmt.Fprint(w, "event: end\ndata: {}\n\n")
			f.Flush()
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-poll.C:
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
			f.Flush()
		}
	}
}
