// Package waitpoints is the wait domain: tokens that a person, an API call
// or a callback completes, human approvals and timers. A waitpoint belongs
// to one project environment and, when a task created it, to that task's
// run; a run that waits on one is WAITING until it resolves.
package waitpoints

import (
	"context"
	"encoding/json"
	"time"
)

// Kind is what a waitpoint waits for.
type Kind string

// Waitpoint kinds.
const (
	// KindHuman is ctx.wait.human: a person answers (helmr approve/reject,
	// or the tokens API), optionally with data checked against a schema.
	KindHuman Kind = "human"
	// KindToken is ctx.wait.createToken or a token made through the API:
	// anything holding its id (or callback URL) completes it.
	KindToken Kind = "token"
	// KindTimer is ctx.wait.for/until: it completes by itself at TimeoutAt.
	KindTimer Kind = "timer"
	// KindRuns is a parent's wait for its child runs (triggerAndWait):
	// it completes, with their results, when all of them have ended.
	KindRuns Kind = "runs"
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	return k == KindHuman || k == KindToken || k == KindTimer || k == KindRuns
}

// Status is a waitpoint's state: WAITING, then one of the others, for good.
type Status string

// Waitpoint states.
const (
	StatusWaiting   Status = "WAITING"
	StatusCompleted Status = "COMPLETED"
	StatusTimedOut  Status = "TIMED_OUT"
	StatusCanceled  Status = "CANCELED"
)

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	switch s {
	case StatusWaiting, StatusCompleted, StatusTimedOut, StatusCanceled:
		return true
	}
	return false
}

// Waitpoint is one wait: a token, a human approval or a timer.
type Waitpoint struct {
	ID      string `json:"id"`
	Project string `json:"project"`
	Env     string `json:"env"`
	// RunID is the run whose task created it; empty for API tokens.
	RunID       string          `json:"runId,omitempty"`
	Kind        Kind            `json:"kind"`
	Status      Status          `json:"status"`
	DisplayText string          `json:"displayText,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Tags        []string        `json:"tags"`
	// IdempotencyKey makes creation idempotent within the project env.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// TimeoutAt is when a waiting token or human wait times out, or when a
	// timer fires; nil waits until resolved.
	TimeoutAt *time.Time `json:"timeoutAt,omitempty"`
	// Data is what completed it (JSON).
	Data json.RawMessage `json:"data,omitempty"`
	// Reason says why it was canceled (helmr reject's reason).
	Reason string `json:"reason,omitempty"`
	// CallbackHash is the SHA-256 (hex) of the callback URL's secret;
	// never shown.
	CallbackHash string     `json:"-"`
	CreatedAt    time.Time  `json:"createdAt"`
	WaitedAt     *time.Time `json:"waitedAt,omitempty"` // when its run began waiting on it
	CompletedAt  *time.Time `json:"completedAt,omitempty"`
	// CallbackURL completes the waitpoint with a POSTed JSON body. Only the
	// answer that created the waitpoint carries it: its secret is stored
	// hashed.
	CallbackURL string `json:"callbackUrl,omitempty"`
}

// Filter selects waitpoints for List. Empty fields match everything but
// Project and Env, which the API always sets.
type Filter struct {
	Project string
	Env     string
	Status  Status
	RunID   string
	Tag     string
	// Kind selects one kind (human waits, say); empty: every kind.
	Kind Kind
	// Waited selects the waitpoints a run is waiting on (WaitedAt set).
	Waited bool
	Limit  int
	Cursor string
}

// Page is one page of waitpoints, newest first.
type Page struct {
	Waitpoints []Waitpoint `json:"waitpoints"`
	NextCursor string      `json:"nextCursor,omitempty"`
}

// Resolution ends a waiting waitpoint.
type Resolution struct {
	Status Status // COMPLETED, TIMED_OUT or CANCELED
	Data   json.RawMessage
	Reason string
	Time   time.Time
}

// Store persists waitpoints. Every method is atomic.
type Store interface {
	// CreateWaitpoint inserts w as WAITING. If w.IdempotencyKey is set and
	// a waitpoint of the same project and env holds it, it returns that
	// one and created=false instead.
	CreateWaitpoint(ctx context.Context, w Waitpoint) (wp Waitpoint, created bool, err error)
	// GetWaitpoint returns errdefs.ErrNotFound for an unknown id.
	GetWaitpoint(ctx context.Context, id string) (Waitpoint, error)
	// ListWaitpoints returns waitpoints matching f, newest first.
	ListWaitpoints(ctx context.Context, f Filter) (Page, error)
	// ResolveWaitpoint moves a WAITING waitpoint to r.Status with r's data
	// or reason. A waitpoint already in r.Status with the same data (byte
	// for byte: callers canonicalize it) is returned with changed=false;
	// any other resolved waitpoint is errdefs.ErrConflict (wrapped); an unknown id
	// errdefs.ErrNotFound.
	ResolveWaitpoint(ctx context.Context, id string, r Resolution) (wp Waitpoint, changed bool, err error)
	// MarkWaited records when the waitpoint's run began waiting on it
	// (the first time only); errdefs.ErrNotFound for an unknown id.
	MarkWaited(ctx context.Context, id string, at time.Time) (Waitpoint, error)
	// DueWaitpoints returns up to limit WAITING waitpoints whose TimeoutAt
	// is at or before now, earliest first.
	DueWaitpoints(ctx context.Context, now time.Time, limit int) ([]Waitpoint, error)
}

// Result is what a task's wait resolves to (the adapter's answer to
// wait.human and wait.forToken): {ok:true,data}, {ok:false,timedOut:true}
// or {ok:false,canceled:true,reason}.
type Result struct {
	OK       bool            `json:"ok"`
	Data     json.RawMessage `json:"data,omitempty"`
	TimedOut bool            `json:"timedOut,omitempty"`
	Canceled bool            `json:"canceled,omitempty"`
	Reason   string          `json:"reason,omitempty"`
}

// ResultOf is the task's view of a resolved waitpoint.
func ResultOf(w Waitpoint) Result {
	switch w.Status {
	case StatusCompleted:
		d := w.Data
		if len(d) == 0 {
			d = json.RawMessage("null")
		}
		return Result{OK: true, Data: d}
	case StatusTimedOut:
		return Result{TimedOut: true}
	default:
		return Result{Canceled: true, Reason: w.Reason}
	}
}
