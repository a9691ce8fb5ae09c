package runs

import (
	"context"
	"time"

	"github.com/helmr/helmr/internal/workers"
)

// Store persists runs and their events. Every method is atomic.
type Store interface {
	// CreateRun inserts r (status QUEUED) and its first status event. If
	// r.IdempotencyKey is set and a run with the same project, env, task and
	// key exists, it returns that run and created=false instead.
	CreateRun(ctx context.Context, r Run) (run Run, created bool, err error)
	// GetRun returns errdefs.ErrNotFound for an unknown id.
	GetRun(ctx context.Context, id string) (Run, error)
	// ListRuns returns runs matching f, newest first.
	ListRuns(ctx context.Context, f Filter) (Page, error)
	// Transition applies t; errdefs.ErrNotFound for an unknown run, errdefs.ErrConflict
	// (wrapped) when the run's status is not in t.From.
	Transition(ctx context.Context, id string, t Transition) (Run, Event, error)
	// AppendEvents appends events to the run's log with consecutive
	// sequence numbers; errdefs.ErrNotFound for an unknown run.
	AppendEvents(ctx context.Context, id string, evs []NewEvent) ([]Event, error)
	// ListEvents returns up to limit events with Seq > after, in order;
	// errdefs.ErrNotFound for an unknown run. limit <= 0 means the store's default.
	ListEvents(ctx context.Context, id string, after int64, limit int) ([]Event, error)
	// LeaseRun moves the oldest QUEUED run whose Needs fit offer
	// (offer.Fits: CPU, memory, digests) to STARTING for workerID and
	// returns it; errdefs.ErrNotFound when no such run is queued. Concurrent callers
	// never lease the same run.
	// Runs not yet due (AvailableAt), of a paused queue, or of a queue
	// (and concurrency key) or environment (envLimit > 0) whose slots are
	// all held are passed over; higher Priority goes first.
	LeaseRun(ctx context.Context, workerID string, offer workers.Capabilities, now time.Time, envLimit int) (Run, error)
	// ReleaseSlot frees the queue slot of a WAITING run whose sandbox was
	// parked; errdefs.ErrConflict if it is not waiting.
	ReleaseSlot(ctx context.Context, id string) error
	// BecameDue reports whether a QUEUED run's AvailableAt is in
	// (since, until]: a delayed run or a retry became leasable.
	BecameDue(ctx context.Context, since, until time.Time) (bool, error)
	// ExpireRuns ends as EXPIRED the QUEUED runs whose ExpiresAt passed.
	ExpireRuns(ctx context.Context, now time.Time) ([]Run, error)
	// DeclareQueue sets a queue's concurrency limit, keeping its pause.
	DeclareQueue(ctx context.Context, q Queue) error
	// PauseQueue pauses or resumes a queue (made if unknown).
	PauseQueue(ctx context.Context, project, env, name string, paused bool) (Queue, error)
	// GetQueue returns a queue with its counts (errdefs.ErrNotFound if
	// no declaration or run names it); ListQueues those of an env.
	GetQueue(ctx context.Context, project, env, name string) (Queue, error)
	ListQueues(ctx context.Context, project, env string) ([]Queue, error)
	// DropRunHost clears the host requirement (Needs.Host) of run id if it
	// is QUEUED and still needs host: any worker may take it. errdefs.ErrNotFound
	// for an unknown run, errdefs.ErrConflict (wrapped) otherwise.
	DropRunHost(ctx context.Context, id, host string) error
	// LinkChildWait records that a waitpoint waits for the runs ids, in
	// order (a repeat changes nothing); ChildWaitsOf returns the
	// waitpoints that wait for run id; ChildWaitRuns the runs a waitpoint
	// waits for, in order (see children.go).
	LinkChildWait(ctx context.Context, waitpointID string, ids []string) error
	ChildWaitsOf(ctx context.Context, id string) ([]string, error)
	ChildWaitRuns(ctx context.Context, waitpointID string) ([]Run, error)
}
