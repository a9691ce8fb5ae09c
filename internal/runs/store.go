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
	LeaseRun(ctx context.Context, workerID string, offer workers.Capabilities, now time.Time) (Run, error)
	// DropRunHost clears the host requirement (Needs.Host) of run id if it
	// is QUEUED and still needs host: any worker may take it. errdefs.ErrNotFound
	// for an unknown run, errdefs.ErrConflict (wrapped) otherwise.
	DropRunHost(ctx context.Context, id, host string) error
}
