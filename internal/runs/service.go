package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workers"
	"github.com/helmr/helmr/internal/workspaces"
)

// MaxPayloadBytes caps a run's JSON payload.
const MaxPayloadBytes = 4 << 20

// DefaultMaxDuration applies to tasks that declare none.
const DefaultMaxDuration = 3600

// TaskLookup is the subset of deployments.Store that triggering needs.
type TaskLookup interface {
	GetTask(ctx context.Context, project, env, taskID string) (deployments.Task, error)
}

// WorkerTTL is how long after its last heartbeat or request for work a
// worker counts as connected, by default.
const WorkerTTL = time.Minute

// Service implements the run lifecycle on top of a Store.
type Service struct {
	// EnvConcurrency, if positive, bounds how many task runs of one
	// project environment hold a slot at once (HELMR_ENV_CONCURRENCY).
	EnvConcurrency int
	// WorkerTTL: a worker silent for longer counts as gone (default
	// WorkerTTL). Set before use.
	WorkerTTL time.Duration
	// Vault, if set, resolves runs' secret bindings. Set before use.
	Vault SecretVault
	// Deployments, if set, lets build secrets be checked against the
	// run's image. Set before use.
	Deployments DeploymentLookup
	// Workspaces, if set, gives every run a workspace: the one it asks
	// for, or a new one. Set before use.
	Workspaces workspaces.Store
	// Checkpoints, if set, tells parked runs (see Requeue): WAITING runs
	// no worker holds. Set before use.
	Checkpoints CheckpointLister
	// DropCheckpoints, if set, deletes run runID's checkpoints (records
	// and blobs): a retry that starts from a fresh sandbox calls it, so
	// that its lease carries none. Set before use.
	DropCheckpoints func(ctx context.Context, runID string)

	// Ended, if set, is called after a run reached a terminal state through
	// Cancel or Finish (the waitpoint service cancels the run's waits).
	// Set before use.
	Ended func(ctx context.Context, r Run)
	// Retried, if set, is called after a failed attempt of r was queued
	// to be tried again (the waitpoint service cancels the waits of the
	// attempt given up: the next one waits anew). Set before use.
	Retried func(ctx context.Context, r Run)
	// ChildWaits, if set, makes and completes the waitpoints of parents
	// that wait for their children (see children.go). Set before use.
	ChildWaits ChildWaits
	// Observer, if set, is told of the runs this service leases and ends
	// (metrics, spans). Set before use.
	Observer Observer

	store   Store
	tasks   TaskLookup
	workers workers.Store
	broker  *Broker
	log     *slog.Logger
	now     func() time.Time

	liveMu sync.Mutex // guards live and liveAt (see recentLiveHosts)
	live   map[string]bool
	liveAt time.Time
}

// NewService wires a run service.
func NewService(store Store, tasks TaskLookup, ws workers.Store, broker *Broker, log *slog.Logger) *Service {
	return &Service{WorkerTTL: WorkerTTL, store: store, tasks: tasks, workers: ws, broker: broker, log: log,
		now: func() time.Time { return time.Now().UTC() }}
}

// Broker returns the service's change notifier.
func (s *Service) Broker() *Broker { return s.broker }

// TriggerRequest asks for a new run of a deployed task.
type TriggerRequest struct {
	Project        string
	Env            string
	TaskID         string
	Payload        json.RawMessage
	IdempotencyKey string
	// Secrets binds the task's declared secrets: name → "vault:NAME".
	Secrets map[string]string
	// WorkspaceID attaches the run to an existing workspace of the same
	// project environment; empty: a new workspace.
	WorkspaceID string
	// ReplayOf names the run of the same task and project environment
	// this one replays; empty: none.
	ReplayOf string
	// Run options (see flow.go): the queue (default the task's),
	// concurrency key, priority (higher first), tags, a delay or a time
	// to start at, a ttl after which an unstarted run expires, and how
	// long the idempotency key holds.
	Queue             string
	ConcurrencyKey    string
	Priority          int
	Tags              []string
	Delay             time.Duration
	StartAt           time.Time
	TTL               time.Duration
	IdempotencyKeyTTL time.Duration
	// Machine sizes this run's sandbox smaller than (or as) the task's
	// declared resources: vCPUs and memory ("512Mi"); zero: as declared.
	MachineCPU    float64
	MachineMemory string
	// ParentID and RootID link a child run to the run that triggered it
	// and the root of its tree (see children.go); empty: none.
	ParentID, RootID string
}

// Trigger creates a QUEUED run of the latest deployment of the task. With an
// idempotency key, a repeat returns the first run and created=false.
func (s *Service) Trigger(ctx context.Context, req TriggerRequest) (Run, bool, error) {
	if len(req.Payload) == 0 {
		req.Payload = json.RawMessage("null")
	}
	if len(req.Payload) > MaxPayloadBytes {
		return Run{}, false, fmt.Errorf("payload is %d bytes, more than the %d allowed: %w", len(req.Payload), MaxPayloadBytes, errdefs.ErrInvalid)
	}
	if !json.Valid(req.Payload) {
		return Run{}, false, fmt.Errorf("payload is not valid JSON: %w", errdefs.ErrInvalid)
	}
	if len(req.IdempotencyKey) > 256 {
		return Run{}, false, fmt.Errorf("idempotency key longer than 256 characters: %w", errdefs.ErrInvalid)
	}
	task, err := s.tasks.GetTask(ctx, req.Project, req.Env, req.TaskID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return Run{}, false, fmt.Errorf("task %q in %s/%s: %w", req.TaskID, req.Project, req.Env, errdefs.ErrNotFound)
	}
	if err != nil {
		// Anything else (the store is down, say) is not the caller's
		// mistake: no kind, so a 5xx.
		return Run{}, false, fmt.Errorf("look up task %q in %s/%s: %w", req.TaskID, req.Project, req.Env, err)
	}
	if req.ReplayOf != "" {
		orig, err := s.store.GetRun(ctx, req.ReplayOf)
		if err != nil || orig.Project != req.Project || orig.Env != req.Env || orig.TaskID != req.TaskID {
			return Run{}, false, fmt.Errorf("replayOf %q is not a run of task %q in %s/%s: %w", req.ReplayOf, req.TaskID, req.Project, req.Env, errdefs.ErrInvalid)
		}
	}
	if err := checkInput(task, req.Payload); err != nil {
		return Run{}, false, err
	}
	if err := s.checkBindings(ctx, req, task); err != nil {
		return Run{}, false, err
	}
	opts, err := runOptions(req, task, s.now())
	if err != nil {
		return Run{}, false, fmt.Errorf("%v: %w", err, errdefs.ErrInvalid)
	}
	if err := s.checkPayload(ctx, req); err != nil {
		return Run{}, false, err
	}
	maxDur := task.Spec.MaxDuration
	if maxDur <= 0 {
		maxDur = DefaultMaxDuration
	}
	needs := needsOf(task)
	if err := machine(req, &needs); err != nil {
		return Run{}, false, fmt.Errorf("%v: %w", err, errdefs.ErrInvalid)
	}
	ws, fresh, err := s.workspaceFor(ctx, req, task)
	if err != nil {
		return Run{}, false, err
	}
	host, moved, err := s.PlaceWorkspace(ctx, ws)
	needs.Host = host
	if err != nil {
		return Run{}, false, fmt.Errorf("place the run's workspace: %w", err)
	}
	r, created, err := s.store.CreateRun(ctx, Run{
		Project: req.Project, Env: req.Env, TaskID: req.TaskID,
		DeploymentID: task.DeploymentID, DeploymentVersion: task.DeploymentVersion,
		Status: StatusQueued, Payload: req.Payload, IdempotencyKey: req.IdempotencyKey, Secrets: req.Secrets,
		MaxDurationSec: maxDur, Needs: needs, CreatedAt: s.now(), WorkspaceID: ws.ID, ReplayOf: req.ReplayOf,
		Queue: opts.Queue, ConcurrencyKey: opts.ConcurrencyKey, Priority: opts.Priority, Tags: opts.Tags,
		AvailableAt: opts.AvailableAt, ExpiresAt: opts.ExpiresAt, Retry: opts.Retry, IdempotencyKeyExpiresAt: opts.IdempotencyKeyExpiresAt,
		ParentID: req.ParentID, RootID: req.RootID,
	})
	if fresh && (err != nil || !created) {
		// The run was not made (or is a repeat of one that has its own):
		// the new workspace serves nothing.
		if derr := s.Workspaces.DeleteWorkspace(ctx, ws.ID, s.now()); derr != nil {
			s.log.Warn("drop an unused workspace", "workspace_id", ws.ID, "err", derr)
		}
	}
	if err != nil {
		return Run{}, false, fmt.Errorf("create run: %w", err)
	}
	if created {
		if moved != nil {
			if err := s.Note(ctx, r.ID, *moved); err != nil {
				s.log.Warn("note a moved run", "run_id", r.ID, "err", err)
			}
		}
		s.explainWait(ctx, r)
		s.broker.Publish(r.ID)
		s.broker.PublishQueue()
	}
	return r, created, nil
}

// needsOf reads what a task's sandbox asks of a worker. A task whose image
// was built at deploy also needs that image again: its digest, and a worker
// with the built-in base it was built on (registry and OCI bases are the
// same bytes everywhere their digest is).
func needsOf(t deployments.Task) workers.Need {
	var n workers.Need
	if sb := t.Spec.Sandbox; sb != nil {
		n.CPU = sb.Resources.CPU
		n.MemoryBytes, _ = deployments.ParseMemory(sb.Resources.Memory)
	}
	if img := t.Image; img != nil {
		n.Image, n.BaseDigest = img.Digest, img.BaseDigest
		if strings.HasPrefix(img.Base, "helmr/") {
			n.Digests = []string{"rootfs:" + img.Base + "@" + img.BaseDigest}
		}
	}
	return n
}

// BuildMaxDuration bounds a build run.
const BuildMaxDuration = 2 * 3600

// QueueBuild queues the build run id for deployment d, which names it:
// a worker builds every task's image, and d becomes READY when it
// completes.
func (s *Service) QueueBuild(ctx context.Context, id string, d deployments.Deployment, opts BuildPayload) (Run, error) {
	payload, _ := json.Marshal(opts)
	r, _, err := s.store.CreateRun(ctx, Run{
		ID: id, Kind: KindBuild, Project: d.Project, Env: d.Env,
		DeploymentID: d.ID, DeploymentVersion: d.Version,
		Status: StatusQueued, Payload: payload, MaxDurationSec: BuildMaxDuration, CreatedAt: s.now(),
	})
	if err != nil {
		return Run{}, fmt.Errorf("queue the build of deployment %s: %w", d.ID, err)
	}
	s.explainWait(ctx, r)
	s.broker.Publish(r.ID)
	s.broker.PublishQueue()
	return r, nil
}

// explainWait records, as a system event, why a new run will wait when no
// connected worker can take it. The run stays QUEUED: a worker that fits
// may still connect.
func (s *Service) explainWait(ctx context.Context, r Run) {
	ws, err := s.workers.ListWorkers(ctx, s.now().Add(-s.WorkerTTL))
	if err != nil {
		s.log.Warn("list workers", "err", err)
		return
	}
	var why []string
	for _, w := range ws {
		ok, reason := w.Takes(r.Needs)
		if ok {
			return
		}
		why = append(why, w.ID+": "+reason)
	}
	msg := "no worker is connected: the run waits for one"
	if len(why) > 0 {
		msg = "no connected worker can take this run (" + strings.Join(why, "; ") + "): it waits for one that can"
	}
	data, _ := json.Marshal(SystemData{Message: msg, Attrs: map[string]string{"reason": "no_fitting_worker"}})
	if _, err := s.store.AppendEvents(ctx, r.ID, []NewEvent{{Type: EventSystem, Time: s.now(), Data: data}}); err != nil {
		s.log.Warn("record why a run waits", "run_id", r.ID, "err", err)
	}
}

// Get returns a run.
func (s *Service) Get(ctx context.Context, id string) (Run, error) { return s.store.GetRun(ctx, id) }

// List returns a page of runs.
func (s *Service) List(ctx context.Context, f Filter) (Page, error) {
	if f.Status != "" && !f.Status.Valid() {
		return Page{}, fmt.Errorf("unknown status %q: %w", f.Status, errdefs.ErrInvalid)
	}
	return s.store.ListRuns(ctx, f)
}

// MaxEventsPage is the most events one Events call returns.
const MaxEventsPage = 10000

// Events returns up to limit events after the cursor (0: 1000).
func (s *Service) Events(ctx context.Context, id string, after int64, limit int) ([]Event, error) {
	if _, err := s.store.GetRun(ctx, id); err != nil {
		return nil, err
	}
	switch {
	case limit <= 0:
		limit = 1000
	case limit > MaxEventsPage:
		limit = MaxEventsPage
	}
	return s.store.ListEvents(ctx, id, after, limit)
}

// Cancel ends a run that has not finished. Cancelling a finished run is a
// conflict; cancelling a cancelled run returns it unchanged.
func (s *Service) Cancel(ctx context.Context, id string) (Run, error) {
	now := s.now()
	r, _, err := s.store.Transition(ctx, id, Transition{
		From: []Status{StatusQueued, StatusStarting, StatusRunning, StatusWaiting},
		To:   StatusCanceled, FinishedAt: &now, Time: now,
		Error: &Error{Class: ClassCanceled, Message: "run canceled"},
	})
	if err != nil {
		cur, gerr := s.store.GetRun(ctx, id)
		if gerr == nil && cur.Status == StatusCanceled {
			return cur, nil
		}
		if gerr == nil && cur.Status.Terminal() {
			return Run{}, fmt.Errorf("run %s already finished as %s: %w", id, cur.Status, errdefs.ErrConflict)
		}
		return Run{}, err
	}
	s.broker.Publish(id)
	s.ended(ctx, r)
	s.cancelChildren(context.WithoutCancel(ctx), r)
	return r, nil
}

func (s *Service) ended(ctx context.Context, r Run) {
	if s.Observer != nil {
		s.Observer.RunEnded(r)
	}
	if s.Ended != nil {
		s.Ended(context.WithoutCancel(ctx), r)
	}
	s.childEnded(context.WithoutCancel(ctx), r)
}

// WaitOn records note (the waitpoint the run waits on) as a system event
// and moves a RUNNING run to WAITING; a run already WAITING (on another
// waitpoint too) stays so. Time spent WAITING does not count against the
// task's maxDuration: the worker's clock for it stops (see worker).
func (s *Service) WaitOn(ctx context.Context, id string, note SystemData) (Run, error) {
	return s.waitStep(ctx, id, note, StatusRunning, StatusWaiting)
}

// Resume records note (how the waitpoint resolved) and moves a WAITING run
// back to RUNNING; a RUNNING run stays so.
func (s *Service) Resume(ctx context.Context, id string, note SystemData) (Run, error) {
	return s.waitStep(ctx, id, note, StatusWaiting, StatusRunning)
}

func (s *Service) waitStep(ctx context.Context, id string, note SystemData, from, to Status) (Run, error) {
	cur, err := s.store.GetRun(ctx, id)
	if err != nil {
		return Run{}, err
	}
	if cur.Status != from && cur.Status != to {
		return Run{}, fmt.Errorf("run %s is %s, not %s or %s: %w", id, cur.Status, from, to, errdefs.ErrConflict)
	}
	now := s.now()
	data, _ := json.Marshal(note)
	if _, err := s.store.AppendEvents(ctx, id, []NewEvent{{Type: EventSystem, Time: now, Data: data}}); err != nil {
		return Run{}, fmt.Errorf("record the wait of run %s: %w", id, err)
	}
	r, _, err := s.store.Transition(ctx, id, Transition{From: []Status{from}, To: to, Time: now})
	if errors.Is(err, errdefs.ErrConflict) {
		r, err = s.store.GetRun(ctx, id)
		if err == nil && r.Status != to {
			err = fmt.Errorf("run %s is %s, not %s: %w", id, r.Status, to, errdefs.ErrConflict)
		}
	}
	s.broker.Publish(id)
	return r, err
}

// Lease records the worker and its capabilities, then hands it the oldest
// queued run that fits them (STARTING).
func (s *Service) Lease(ctx context.Context, workerID string, caps workers.Capabilities) (Run, error) {
	now := s.now()
	if err := s.workers.UpsertWorker(ctx, workers.Worker{ID: workerID, Capabilities: caps, LastSeen: now}); err != nil {
		return Run{}, fmt.Errorf("record worker %s: %w", workerID, err)
	}
	r, err := s.store.LeaseRun(ctx, workerID, caps, now, s.EnvConcurrency)
	if err != nil {
		return Run{}, err
	}
	if s.Observer != nil {
		s.Observer.RunLeased(r, now)
	}
	if r.WorkspaceID != "" && s.Workspaces != nil && caps.Host != "" {
		// The workspace's files are on this worker's host from now on:
		// its next runs go there.
		if err := s.Workspaces.UseWorkspace(ctx, r.WorkspaceID, r.ID, caps.Host, now); err != nil {
			s.log.Error("record where a workspace is", "workspace_id", r.WorkspaceID, "run_id", r.ID, "err", err)
		}
	}
	s.broker.Publish(r.ID)
	return r, nil
}

// workspaceFor returns the workspace a new run attaches to: the one asked
// for, which must be a live workspace of the run's project environment
// that no unfinished run holds (a workspace serves one run at a time), or
// a new one (fresh).
func (s *Service) workspaceFor(ctx context.Context, req TriggerRequest, task deployments.Task) (ws workspaces.Workspace, fresh bool, err error) {
	if s.Workspaces == nil {
		if req.WorkspaceID != "" {
			return ws, false, fmt.Errorf("this control plane keeps no workspaces: %w", errdefs.ErrInvalid)
		}
		return ws, false, nil
	}
	if req.WorkspaceID == "" {
		w := workspaces.Workspace{Project: req.Project, Env: req.Env, TaskID: req.TaskID, CreatedAt: s.now()}
		if sb := task.Spec.Sandbox; sb != nil {
			w.Sandbox = sb.Name
			w.QuotaBytes, _ = deployments.ParseDisk("disk", sb.Resources.Disk) // checked at deploy; 0 if none
		}
		ws, err = s.Workspaces.CreateWorkspace(ctx, w)
		if err != nil {
			return ws, false, fmt.Errorf("create a workspace for the run: %w", err)
		}
		return ws, true, nil
	}
	ws, err = s.Workspaces.GetWorkspace(ctx, req.WorkspaceID)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return ws, false, fmt.Errorf("look up workspace %q: %w", req.WorkspaceID, err)
	}
	if err != nil || ws.Project != req.Project || ws.Env != req.Env {
		return ws, false, fmt.Errorf("workspace %q in %s/%s: %w", req.WorkspaceID, req.Project, req.Env, errdefs.ErrNotFound)
	}
	if ws.DeletedAt != nil {
		return ws, false, fmt.Errorf("workspace %s was deleted: %w", ws.ID, errdefs.ErrConflict)
	}
	if ws.Paused != nil {
		return ws, false, fmt.Errorf("workspace %s is paused: resume its sandbox before a run uses it: %w", ws.ID, errdefs.ErrConflict)
	}
	return ws, false, s.WorkspaceFree(ctx, ws)
}

// WorkspaceFree reports (errdefs.ErrConflict) whether an unfinished run holds
// ws: a workspace serves one run, or direct operations, at a time.
func (s *Service) WorkspaceFree(ctx context.Context, ws workspaces.Workspace) error {
	page, err := s.store.ListRuns(ctx, Filter{Project: ws.Project, Env: ws.Env, WorkspaceID: ws.ID, Limit: 1})
	if err != nil {
		return err
	}
	if len(page.Runs) > 0 && !page.Runs[0].Status.Terminal() {
		return fmt.Errorf("workspace %s is in use by run %s (%s): a workspace serves one run at a time: %w",
			ws.ID, page.Runs[0].ID, page.Runs[0].Status, errdefs.ErrConflict)
	}
	return nil
}

// Started moves a leased run to RUNNING on the given tier and records the
// tier as a system event.
func (s *Service) Started(ctx context.Context, id, workerID, tier string, note SystemData) (Run, error) {
	now := s.now()
	data, _ := json.Marshal(note)
	if _, err := s.store.AppendEvents(ctx, id, []NewEvent{{Type: EventSystem, Time: now, Data: data}}); err != nil {
		return Run{}, fmt.Errorf("record tier: %w", err)
	}
	r, _, err := s.store.Transition(ctx, id, Transition{
		From: []Status{StatusStarting}, To: StatusRunning, WorkerID: workerID, Tier: tier, StartedAt: &now, Time: now,
	})
	s.broker.Publish(id)
	return r, err
}

// AppendLogs records log lines as events.
func (s *Service) AppendLogs(ctx context.Context, id string, lines []LogData, at time.Time) error {
	if len(lines) == 0 {
		return nil
	}
	evs := make([]NewEvent, len(lines))
	for i, l := range lines {
		data, _ := json.Marshal(l)
		evs[i] = NewEvent{Type: EventLog, Time: at, Data: data}
	}
	if _, err := s.store.AppendEvents(ctx, id, evs); err != nil {
		return err
	}
	s.broker.Publish(id)
	return nil
}

// Outcome is how a worker saw a run end.
type Outcome struct {
	Status Status          `json:"status"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  *Error          `json:"error,omitempty"`
	// Notes are recorded as system events before the final status (for
	// example: the sandbox hit its process limit).
	Notes []SystemData `json:"notes,omitempty"`
	// WorkerID and Attempt, when the worker sets them, say which attempt
	// on which worker ended: the outcome is refused (errdefs.ErrConflict)
	// if the run has moved on, say a retry after this worker was given
	// up as lost.
	WorkerID string `json:"workerId,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`

	// lost: the run's worker was lost (not the task's doing), so a retry
	// restores the run's last checkpoint when it has one.
	lost bool
}

// held is the attempt o is about, if it says.
func (o Outcome) held() *Hold {
	if o.WorkerID == "" {
		return nil
	}
	return &Hold{WorkerID: o.WorkerID, Attempt: o.Attempt}
}

// Finish moves a started run to its terminal status. A run cancelled
// meanwhile stays cancelled (errdefs.ErrConflict).
func (s *Service) Finish(ctx context.Context, id string, o Outcome) (Run, error) {
	if !o.Status.Terminal() {
		return Run{}, fmt.Errorf("finish with non-terminal status %q: %w", o.Status, errdefs.ErrInvalid)
	}
	now := s.now()
	if len(o.Notes) > 0 {
		evs := make([]NewEvent, len(o.Notes))
		for i, n := range o.Notes {
			data, _ := json.Marshal(n)
			evs[i] = NewEvent{Type: EventSystem, Time: now, Data: data}
		}
		if _, err := s.store.AppendEvents(ctx, id, evs); err != nil {
			return Run{}, fmt.Errorf("record notes: %w", err)
		}
	}
	if r, ok, err := s.retry(ctx, id, o, now); ok || err != nil {
		return r, err
	}
	r, _, err := s.store.Transition(ctx, id, Transition{
		From: []Status{StatusStarting, StatusRunning, StatusWaiting}, To: o.Status,
		Output: o.Output, Error: o.Error, FinishedAt: &now, Time: now, Held: o.held(),
	})
	s.broker.Publish(id)
	if err == nil {
		s.ended(ctx, r)
	}
	return r, err
}

// ReturnLease puts run r, just leased by r.WorkerID, back in the queue:
// the worker went away as the lease was handed to it.
func (s *Service) ReturnLease(ctx context.Context, r Run) error {
	return s.requeueUnstarted(ctx, r, fmt.Sprintf("worker %s went away as the run was handed to it", r.WorkerID))
}

// requeueUnstarted puts a STARTING run whose worker was lost (msg says
// how) back in the queue: its sandbox was not up, its task had not begun,
// so nothing of it ran and nothing is lost but time.
func (s *Service) requeueUnstarted(ctx context.Context, r Run, msg string) error {
	now := s.now()
	_, _, err := s.store.Transition(ctx, r.ID, Transition{From: []Status{StatusStarting}, To: StatusQueued, Time: now, Due: &now,
		Held: &Hold{WorkerID: r.WorkerID, Attempt: r.Attempt}})
	if err != nil {
		return err
	}
	if err := s.Note(ctx, r.ID, SystemData{Message: msg + "; the run had not started: queued again, as the same attempt",
		Attrs: map[string]string{"worker": r.WorkerID, "attempt": fmt.Sprint(max(r.Attempt, 1))}}); err != nil {
		return err
	}
	s.broker.PublishQueue()
	return nil
}

// FailOrphans ends, as FAILED/guest_runtime with message, every run that a
// worker had started (STARTING, RUNNING or WAITING) and that no worker runs any
// more. helmr dev calls it at start-up: its only worker is in-process, so a
// run it left unfinished was cut off by the previous process's end.
func (s *Service) FailOrphans(ctx context.Context, message string) (int, error) {
	return s.failStarted(ctx, func(r Run) (string, bool) { return message + "; " + s.lostState(ctx, r), true })
}

// failStarted fails, as guest_runtime, each started run (STARTING,
// RUNNING or WAITING: a waiting run's sandbox is on its worker, unless the
// run is parked) for which pick returns true, with pick's message.
func (s *Service) failStarted(ctx context.Context, pick func(Run) (string, bool)) (int, error) {
	n := 0
	for _, st := range []Status{StatusStarting, StatusRunning, StatusWaiting} {
		cursor := ""
		for {
			page, err := s.store.ListRuns(ctx, Filter{Status: st, Limit: 500, Cursor: cursor})
			if err != nil {
				return n, err
			}
			for _, r := range page.Runs {
				if st == StatusWaiting && s.parked(ctx, r.ID) {
					continue // parked: no worker holds it
				}
				msg, ok := pick(r)
				if !ok {
					continue
				}
				if st == StatusStarting {
					// Its task never ran: it goes back to the queue
					// as the same attempt, whatever its retry policy.
					if err := s.requeueUnstarted(ctx, r, msg); err != nil && !errors.Is(err, errdefs.ErrConflict) {
						return n, err
					}
					n++
					continue
				}
				_, err := s.Finish(ctx, r.ID, Outcome{Status: StatusFailed, Error: &Error{Class: ClassGuestRuntime, Message: msg},
					WorkerID: r.WorkerID, Attempt: r.Attempt, lost: true})
				if err != nil && !errors.Is(err, errdefs.ErrConflict) {
					return n, err
				}
				n++
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
	}
	return n, nil
}
