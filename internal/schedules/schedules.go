// Package schedules is the schedule domain: cron schedules that trigger a
// deployed task's runs. A schedule is declarative (a task declared with
// schedules.task({cron}) in the SDK, created, updated and removed by the
// deployments of its project environment) or imperative (made through the
// API or CLI, optionally with a deduplication key that turns a second
// create into an update). The ticker fires each tick once across every
// control-plane replica: it claims the tick with a compare-and-set on the
// schedule's row, then triggers the run with an idempotency key derived
// from the schedule and the tick.
package schedules

import (
	"context"
	"time"
)

// Type says where a schedule comes from.
type Type string

// Schedule types.
const (
	// TypeDeclarative schedules come from a deployment's manifest: the
	// deployments of their project environment create, update and remove
	// them; the API can only activate or deactivate them.
	TypeDeclarative Type = "DECLARATIVE"
	// TypeImperative schedules are made through the API or CLI.
	TypeImperative Type = "IMPERATIVE"
)

// Schedule triggers runs of a task at the ticks of a cron expression.
type Schedule struct {
	ID      string `json:"id"`
	Project string `json:"project"`
	Env     string `json:"env"`
	TaskID  string `json:"task"`
	Type    Type   `json:"type"`
	// Cron is the expression: five fields, or six with leading seconds,
	// or a descriptor such as @daily.
	Cron string `json:"cron"`
	// Timezone is the IANA zone the expression is read in; "UTC" by
	// default.
	Timezone string `json:"timezone"`
	// ExternalID is the caller's own reference (a user or tenant id, say);
	// it reaches each run's payload.
	ExternalID string `json:"externalId,omitempty"`
	// DeduplicationKey makes creation an upsert within the project env.
	DeduplicationKey string `json:"deduplicationKey,omitempty"`
	Active           bool   `json:"active"`
	// DeploymentVersion is the deployment that declared a declarative
	// schedule; 0 for imperative ones.
	DeploymentVersion int `json:"deploymentVersion,omitempty"`
	// NextRunAt is the next tick to fire; nil while inactive.
	NextRunAt *time.Time `json:"nextRunAt,omitempty"`
	// LastRunAt is the last tick fired, LastRunID the run it made, and
	// LastError why it made none (the task is not deployed, say).
	LastRunAt *time.Time `json:"lastRunAt,omitempty"`
	LastRunID string     `json:"lastRunId,omitempty"`
	LastError string     `json:"lastError,omitempty"`
	// PendingTick is a tick claimed whose run is not known to exist yet,
	// and PendingUntil when another replica may take it over (the claimer
	// crashed between claim and trigger). Not shown.
	PendingTick  *time.Time `json:"-"`
	PendingUntil *time.Time `json:"-"`
	CreatedAt    time.Time  `json:"createdAt"`
	UpdatedAt    time.Time  `json:"updatedAt"`
}

// Filter selects schedules for List. Project and Env are always set.
type Filter struct {
	Project string
	Env     string
	TaskID  string
	Type    Type
	Limit   int
	Cursor  string
}

// Page is one page of schedules, newest first.
type Page struct {
	Schedules  []Schedule `json:"schedules"`
	NextCursor string     `json:"nextCursor,omitempty"`
}

// Claim takes a due tick of a schedule: the row must still hold Due as its
// next tick, and no other pending tick.
type Claim struct {
	// Due is the next tick the claimer read.
	Due time.Time
	// Tick is the tick to fire (the latest at or before now: a schedule
	// fires once after missing several), Next the one after it.
	Tick, Next time.Time
	// Until is when the claim lapses if the claimer has not finished it.
	Until time.Time
}

// Outcome ends a claimed tick: the run it made, or why it made none.
type Outcome struct {
	Tick  time.Time
	RunID string
	Error string
	Time  time.Time
}

// Declared is a schedule a deployment's manifest declares for a task.
type Declared struct {
	TaskID   string
	Cron     string
	Timezone string
	// Next is the first tick after the sync (used for a new schedule or
	// one whose cron or zone changed).
	Next time.Time
}

// SyncResult says what a deployment's sync changed, by task.
type SyncResult struct {
	Created []string `json:"created,omitempty"`
	Updated []string `json:"updated,omitempty"`
	Deleted []string `json:"deleted,omitempty"`
	// Stale is set when a newer deployment had already synced: nothing
	// changed.
	Stale bool `json:"stale,omitempty"`
}

// Store persists schedules. Every method is atomic.
type Store interface {
	// CreateSchedule inserts s (ID, CreatedAt and UpdatedAt are set when
	// empty). A deduplication key or a declarative task another schedule
	// of the project env holds is errdefs.ErrConflict (wrapped).
	CreateSchedule(ctx context.Context, s Schedule) (Schedule, error)
	// GetSchedule returns errdefs.ErrNotFound for an unknown id.
	GetSchedule(ctx context.Context, id string) (Schedule, error)
	// GetScheduleByKey returns the schedule of project/env holding the
	// deduplication key, or errdefs.ErrNotFound.
	GetScheduleByKey(ctx context.Context, project, env, key string) (Schedule, error)
	// ListSchedules returns schedules matching f, newest first.
	ListSchedules(ctx context.Context, f Filter) (Page, error)
	// UpdateSchedule reads schedule id, holding its row, lets fn change
	// it, and stores what fn left (all but the id, project, env, type,
	// creation time and tick bookkeeping). An error of fn is returned
	// as it is; an unknown id is errdefs.ErrNotFound.
	UpdateSchedule(ctx context.Context, id string, fn func(*Schedule) error) (Schedule, error)
	// DeleteSchedule removes schedule id; errdefs.ErrNotFound if unknown.
	DeleteSchedule(ctx context.Context, id string) error
	// DueSchedules returns up to limit schedules with a tick to fire at
	// now: active ones whose next tick is at or before now, and ones whose
	// pending tick's claim lapsed. Earliest first.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]Schedule, error)
	// NextTick returns the earliest next tick of every active schedule,
	// or nil when none is active.
	NextTick(ctx context.Context) (*time.Time, error)
	// ClaimTick moves an active schedule's next tick from c.Due to c.Next
	// and records c.Tick as pending until c.Until, if its row still holds
	// c.Due and no pending tick; ok=false when another claimer was first
	// (or the schedule changed or went away).
	ClaimTick(ctx context.Context, id string, c Claim) (s Schedule, ok bool, err error)
	// RetakeTick extends the lapsed claim of pending tick tick to until;
	// ok=false when another claimer was first or it finished.
	RetakeTick(ctx context.Context, id string, tick, now, until time.Time) (s Schedule, ok bool, err error)
	// FinishTick clears pending tick o.Tick and records it as the last
	// tick with its run or error; ok=false when it is no longer pending.
	FinishTick(ctx context.Context, id string, o Outcome) (ok bool, err error)
	// SyncDeclared makes project/env's declarative schedules those of
	// decls, as declared by deployment version: it creates the missing
	// ones (active), updates the cron and zone of the others (a change
	// moves the next tick to the declared Next; the active flag stays),
	// and deletes those no longer declared. A sync older than one already
	// applied changes nothing (Stale).
	SyncDeclared(ctx context.Context, project, env string, version int, decls []Declared, now time.Time) (SyncResult, error)
}
