// Package runs is the run domain: a run's lifecycle, its append-only event
// log, and the Store interface that every storage engine implements.
package runs

import (
	"encoding/json"
	"time"

	"github.com/helmr/helmr/internal/workers"
)

// Status is a run's lifecycle state.
type Status string

// Run states. QUEUED → STARTING → RUNNING → one of the terminal states.
const (
	StatusQueued    Status = "QUEUED"
	StatusStarting  Status = "STARTING"
	StatusRunning   Status = "RUNNING"
	StatusWaiting   Status = "WAITING"
	StatusCompleted Status = "COMPLETED"
	StatusFailed    Status = "FAILED"
	StatusTimedOut  Status = "TIMED_OUT"
	StatusCanceled  Status = "CANCELED"
	// StatusExpired: the run was not started before its ttl ran out.
	StatusExpired Status = "EXPIRED"
)

// Terminal reports whether no transition leaves s.
func (s Status) Terminal() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusTimedOut, StatusCanceled, StatusExpired:
		return true
	}
	return false
}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	switch s {
	case StatusQueued, StatusStarting, StatusRunning, StatusWaiting,
		StatusCompleted, StatusFailed, StatusTimedOut, StatusCanceled, StatusExpired:
		return true
	}
	return false
}

// FailureClass names the layer a failed run failed in.
type FailureClass string

// Failure classes, one per layer of the runtime.
const (
	ClassDeploymentBuild  FailureClass = "deployment_build"
	ClassImagePreparation FailureClass = "image_preparation"
	ClassGuestRuntime     FailureClass = "guest_runtime"
	ClassTaskProcess      FailureClass = "task_process"
	ClassTimeout          FailureClass = "timeout"
	ClassParkedWait       FailureClass = "parked_wait"
	ClassCanceled         FailureClass = "canceled"
)

// Error is why a run did not complete.
type Error struct {
	Class   FailureClass `json:"class"`
	Message string       `json:"message"`
	Stack   string       `json:"stack,omitempty"`
	// Name is the thrown error's class name, where the task threw one.
	Name string `json:"name,omitempty"`
	// NoRetry: the task asked to fail without retrying
	// (AbortTaskRunError).
	NoRetry bool `json:"noRetry,omitempty"`
}

// Run kinds: a run executes a task; a build run builds the images of a
// deployment ahead of time (helmr deploy), on a worker, through the same
// queue, leases, events and logs.
const (
	KindTask  = "task"
	KindBuild = "build"
)

// BuildPayload is the payload of a build run.
type BuildPayload struct {
	// NoCache runs every run step again instead of reusing cached layers.
	NoCache bool `json:"noCache,omitempty"`
}

// Run is one execution of a deployed task, or the build of a deployment's
// images (Kind KindBuild, no TaskID).
type Run struct {
	ID                string          `json:"id"`
	Kind              string          `json:"kind"`
	Project           string          `json:"project"`
	Env               string          `json:"env"`
	TaskID            string          `json:"taskId"`
	DeploymentID      string          `json:"deploymentId"`
	DeploymentVersion int             `json:"deploymentVersion"`
	Status            Status          `json:"status"`
	Payload           json.RawMessage `json:"payload"`
	Output            json.RawMessage `json:"output,omitempty"`
	Error             *Error          `json:"error,omitempty"`
	IdempotencyKey    string          `json:"idempotencyKey,omitempty"`
	// IdempotencyKeyExpiresAt: after it, the key no longer returns this
	// run (a trigger with it makes a new one).
	IdempotencyKeyExpiresAt *time.Time `json:"idempotencyKeyExpiresAt,omitempty"`
	// Secrets binds the task's declared secrets to their sources
	// ("vault:NAME"); never values.
	Secrets map[string]string `json:"secrets,omitempty"`
	// WorkspaceID is the workspace the run is attached to.
	WorkspaceID string `json:"workspaceId,omitempty"`
	// ReplayOf is the run this one replays (the same task, run again).
	ReplayOf string `json:"replayOf,omitempty"`
	// ParentID is the run whose task triggered this one (tasks.trigger
	// and friends); RootID the first run of that tree. Both are empty for
	// a run triggered from outside a task.
	ParentID       string `json:"parentId,omitempty"`
	RootID         string `json:"rootId,omitempty"`
	WorkerID       string `json:"workerId,omitempty"`
	Tier           string `json:"tier,omitempty"`
	MaxDurationSec int    `json:"maxDuration"`
	// Needs is what the run's sandbox asks of a worker (from the task).
	Needs workers.Need `json:"needs"`
	// Queue is the queue the run waits in (its task's declared queue, or
	// TaskQueue); ConcurrencyKey splits it per tenant; higher Priority
	// goes first, FIFO within a priority.
	Queue          string `json:"queue"`
	ConcurrencyKey string `json:"concurrencyKey,omitempty"`
	Priority       int    `json:"priority,omitempty"`
	// Tags label the run (filterable).
	Tags []string `json:"tags,omitempty"`
	// AvailableAt: the run is not started before (a delay, or a retry's
	// backoff). ExpiresAt: a run not started by then ends EXPIRED.
	AvailableAt *time.Time `json:"availableAt,omitempty"`
	ExpiresAt   *time.Time `json:"expiresAt,omitempty"`
	// Attempt counts from 1; Retry is the run's policy (nil: one attempt);
	// Attempts are the earlier attempts that failed and were retried.
	Attempt    int          `json:"attempt"`
	Retry      *RetryPolicy `json:"retry,omitempty"`
	Attempts   []Attempt    `json:"attempts,omitempty"`
	CreatedAt  time.Time    `json:"createdAt"`
	StartedAt  *time.Time   `json:"startedAt,omitempty"`
	FinishedAt *time.Time   `json:"finishedAt,omitempty"`
	// LastSeq is the sequence number of the run's latest event.
	LastSeq int64 `json:"lastSeq"`
}

// Event kinds.
const (
	EventStatus = "status" // a lifecycle transition; Data is StatusData
	EventLog    = "log"    // one line of task output; Data is LogData
	EventSystem = "system" // a note from the runtime (tier, image); Data is SystemData
)

// Event is one entry of a run's append-only event log. Seq starts at 1 and
// grows by one per event of the run.
type Event struct {
	RunID string          `json:"runId"`
	Seq   int64           `json:"seq"`
	Type  string          `json:"type"`
	Time  time.Time       `json:"time"`
	Data  json.RawMessage `json:"data"`
}

// StatusData is the payload of a status event.
type StatusData struct {
	From  Status `json:"from,omitempty"`
	To    Status `json:"to"`
	Error *Error `json:"error,omitempty"`
}

// LogData is the payload of a log event.
type LogData struct {
	Stream string `json:"stream"` // "stdout", "stderr", or "build" (image build output)
	Line   string `json:"line"`
}

// SystemData is the payload of a system event.
type SystemData struct {
	Message string            `json:"message"`
	Attrs   map[string]string `json:"attrs,omitempty"`
}

// NewEvent is an event to append; the store assigns Seq.
type NewEvent struct {
	Type string
	Time time.Time
	Data json.RawMessage
}

// Transition moves a run from one of From to To, sets the given fields, and
// appends the status event, atomically.
type Transition struct {
	From []Status
	To   Status
	// Optional fields written with the transition (nil/empty leaves them).
	WorkerID   string
	Tier       string
	Output     json.RawMessage
	Error      *Error
	StartedAt  *time.Time
	FinishedAt *time.Time
	Time       time.Time
	// Retry, with To QUEUED, records the failed attempt and queues the
	// next one (Attempt+1) for At.
	Retry *Retry
	// Due, with To QUEUED, sets AvailableAt: when the run was queued
	// again (a parked run whose wait is over), so that its time in the
	// queue counts from then.
	Due *time.Time
	// Held, if set, makes the transition conditional on the run still
	// being that attempt on that worker: a worker's late report of an
	// attempt that was given up and retried must not end the next one.
	Held *Hold
}

// Hold is one attempt of a run on one worker.
type Hold struct {
	WorkerID string
	Attempt  int
}

// Filter selects runs for List. Empty fields match everything.
type Filter struct {
	Project string
	Env     string
	TaskID  string
	Status  Status
	// Kind selects task runs ("" or KindTask) or build runs (KindBuild).
	Kind string
	// WorkspaceID selects the runs attached to a workspace.
	WorkspaceID string
	// ParentID selects the children of a run.
	ParentID string
	// Since and Until bound the runs' creation time: Since <= created_at <
	// Until; a zero time does not bound.
	Since, Until time.Time
	// IDPrefix selects the runs whose id starts with it (a search by id).
	IDPrefix string
	// Tag selects runs carrying this tag; Queue runs of this queue.
	Tag   string
	Queue string
	// Limit caps the page size (the store applies 1..1000, default 50).
	Limit int
	// Cursor is the opaque NextCursor of a previous page.
	Cursor string
}

// Page is one page of runs, newest first.
type Page struct {
	Runs       []Run  `json:"runs"`
	NextCursor string `json:"nextCursor,omitempty"`
}
