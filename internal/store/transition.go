package store

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// ValidateTransition rejects a transition no run could take: an empty From
// or an unknown To. Both are errdefs.ErrInvalid.
func ValidateTransition(t runs.Transition) error {
	if len(t.From) == 0 {
		return fmt.Errorf("transition to %s: empty from: %w", t.To, errdefs.ErrInvalid)
	}
	if !t.To.Valid() {
		return fmt.Errorf("transition to %q: unknown status: %w", t.To, errdefs.ErrInvalid)
	}
	return nil
}

// ApplyTransition checks that r's status is in t.From (errdefs.ErrConflict,
// wrapped, if not), then sets r's status and every non-empty field of t, and
// returns the status event with sequence number r.LastSeq+1, which it also
// records in r.LastSeq. The caller holds r's row locked.
func ApplyTransition(r *runs.Run, t runs.Transition) (runs.Event, error) {
	if !slices.Contains(t.From, r.Status) {
		return runs.Event{}, fmt.Errorf("transition run %s from %s to %s (want from %v): %w",
			r.ID, r.Status, t.To, t.From, errdefs.ErrConflict)
	}
	if h := t.Held; h != nil && (r.WorkerID != h.WorkerID || max(r.Attempt, 1) != max(h.Attempt, 1)) {
		return runs.Event{}, fmt.Errorf("transition run %s to %s: it is attempt %d on worker %q, not attempt %d on %q: %w",
			r.ID, t.To, max(r.Attempt, 1), r.WorkerID, max(h.Attempt, 1), h.WorkerID, errdefs.ErrConflict)
	}
	data, err := json.Marshal(runs.StatusData{From: r.Status, To: t.To, Error: t.Error})
	if err != nil {
		return runs.Event{}, fmt.Errorf("encode status event: %w", err)
	}
	r.Status = t.To
	if t.WorkerID != "" {
		r.WorkerID = t.WorkerID
	}
	if t.Tier != "" {
		r.Tier = t.Tier
	}
	if len(t.Output) > 0 {
		r.Output = t.Output
	}
	if t.Error != nil {
		r.Error = t.Error
	}
	if t.StartedAt != nil {
		r.StartedAt = TimePtr(t.StartedAt)
	}
	if t.FinishedAt != nil {
		r.FinishedAt = TimePtr(t.FinishedAt)
	}
	if t.Due != nil {
		r.AvailableAt = TimePtr(t.Due)
	}
	if t.Retry != nil {
		// The failed attempt goes to the history; the next one starts
		// afresh.
		f := t.Retry.Failed
		f.FinishedAt = Time(f.FinishedAt)
		f.StartedAt = TimePtr(f.StartedAt)
		r.Attempts = append(r.Attempts, f)
		r.Attempt = max(r.Attempt, 1) + 1
		r.AvailableAt = TimePtr(&t.Retry.At)
		r.Error, r.WorkerID, r.StartedAt, r.FinishedAt, r.Output = nil, "", nil, nil, nil
	}
	r.LastSeq++
	return runs.Event{RunID: r.ID, Seq: r.LastSeq, Type: runs.EventStatus, Time: Time(t.Time), Data: data}, nil
}

// FirstEvent is the status event CreateRun appends with a new run.
func FirstEvent(id string, at time.Time) runs.Event {
	data, _ := json.Marshal(runs.StatusData{To: runs.StatusQueued})
	return runs.Event{RunID: id, Seq: 1, Type: runs.EventStatus, Time: at, Data: data}
}

// NewRun fills the fields CreateRun assigns: ID when empty, status QUEUED,
// CreatedAt (UTC, microseconds; now when zero), LastSeq 1 and no worker
// state. It returns the run and its first event.
func NewRun(r runs.Run) (runs.Run, runs.Event) {
	if r.ID == "" {
		r.ID = NewID(RunPrefix)
	}
	r.Status = runs.StatusQueued
	r.Kind = RunKind(r.Kind)
	r.CreatedAt = Time(r.CreatedAt)
	r.Output, r.Error, r.WorkerID, r.Tier = nil, nil, "", ""
	r.StartedAt, r.FinishedAt = nil, nil
	r.LastSeq = 1
	r.Attempt, r.Attempts = 1, nil
	return r, FirstEvent(r.ID, r.CreatedAt)
}

// NewEvents gives evs the sequence numbers after lastSeq and normalized times.
func NewEvents(id string, lastSeq int64, evs []runs.NewEvent) []runs.Event {
	out := make([]runs.Event, len(evs))
	for i, e := range evs {
		out[i] = runs.Event{RunID: id, Seq: lastSeq + int64(i) + 1, Type: e.Type, Time: Time(e.Time), Data: e.Data}
	}
	return out
}
