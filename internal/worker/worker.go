// Package worker leases queued runs from the control plane, prepares each
// run's image and files, starts its sandbox through a sandbox.Runtime, runs
// the guest adapter with the task, streams logs, and reports the outcome.
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/disk"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/waitpoints"
	"github.com/helmr/helmr/internal/workers"
	"github.com/helmr/helmr/internal/workspaces"
)

// ErrNoWork is returned by ControlPlane.Lease when nothing was queued
// within its wait.
var ErrNoWork = errors.New("no work")

// Lease is a run handed to this worker.
type Lease struct {
	Run  runs.Run                 `json:"run"`
	Task deployments.TaskManifest `json:"task"`
	// Build is the deployment's manifest for a build run (whose Task is
	// empty): the worker builds every task's image.
	Build *deployments.Manifest `json:"build,omitempty"`
	// Restore, if set, is the checkpoint of a parked run whose wait is
	// over: the worker restores its sandbox instead of starting the task.
	Restore *checkpoints.Checkpoint `json:"restore,omitempty"`
	// Workspace is the run's workspace as leased (on this worker's host
	// now), with its latest snapshot: a worker whose copy of its files is
	// older, or that has none, restores the snapshot first.
	Workspace *workspaces.Workspace `json:"workspace,omitempty"`
}

// ParkRequest says that a waiting run was parked, or why it stays as it is.
type ParkRequest struct {
	// Checkpoint, if set, is the run's checkpoint, uploaded already
	// (PutCheckpoint): its sandbox is gone and the worker lets the run go.
	Checkpoint *checkpoints.Checkpoint `json:"checkpoint,omitempty"`
	// Note is the run's event about it.
	Note runs.SystemData `json:"note"`
}

// ControlPlane is what a worker needs from the control plane: in-process
// for helmr dev, over HTTP for remote workers.
type ControlPlane interface {
	// Lease reports the worker's capabilities and waits a while for a
	// queued run that fits them; ErrNoWork if none came.
	Lease(ctx context.Context, workerID string, caps workers.Capabilities) (Lease, error)
	Files(ctx context.Context, deploymentID string) (map[string][]byte, error)
	Started(ctx context.Context, runID, workerID, tier string, note runs.SystemData) error
	Logs(ctx context.Context, runID string, lines []runs.LogData, at time.Time) error
	Finish(ctx context.Context, runID string, o runs.Outcome) error
	Status(ctx context.Context, runID string) (runs.Status, error)
	// RunSecrets returns the values of a run's bound secrets (the run must
	// be this worker's and under way).
	RunSecrets(ctx context.Context, runID string) (map[string]runs.BoundSecret, error)
	// NextOp waits a while for a direct operation on a workspace of host
	// (workspaces.ErrNoOp if none came); FinishOp reports its result.
	NextOp(ctx context.Context, workerID, host string) (workspaces.Op, error)
	FinishOp(ctx context.Context, id string, res workspaces.OpResult) error
	// OpOutput sends a piece of a streamed operation's output.
	OpOutput(ctx context.Context, id string, out workspaces.OpOutput) error
	// StaleWorkspaces returns which of the workspaces ids (whose files
	// this worker, of host, holds) were deleted or are unknown, and which
	// moved to another host.
	StaleWorkspaces(ctx context.Context, host string, ids []string) (deleted, moved []string, err error)
	// BuildSecret returns a build secret the run's image names (the run
	// must be this worker's and under way).
	BuildSecret(ctx context.Context, runID, name string) (runs.BoundSecret, error)
	// Heartbeat says the worker is alive, busy or not; a worker silent for
	// the control plane's worker TTL loses its runs (FAILED).
	Heartbeat(ctx context.Context, workerID string, caps workers.Capabilities) error
	// CreateWaitpoint creates a waitpoint of the run (its task's
	// ctx.wait.*); a token's answer carries its callback URL.
	CreateWaitpoint(ctx context.Context, runID string, req waitpoints.CreateRequest) (waitpoints.Waitpoint, error)
	// BeginWait moves the run to WAITING on a waitpoint of its project env.
	BeginWait(ctx context.Context, runID, waitpointID string) (waitpoints.Waitpoint, error)
	// AwaitWaitpoint returns the waitpoint once it resolved, or as it is
	// (WAITING) after a long poll.
	AwaitWaitpoint(ctx context.Context, runID, waitpointID string) (waitpoints.Waitpoint, error)
	// EndWait moves the run back to RUNNING after its waits.
	EndWait(ctx context.Context, runID, waitpointID string) error
	// TriggerChildren triggers runs as children of the run (its task's
	// tasks.*); with req.Wait, the answer names the waitpoint that
	// completes when all of them have ended.
	TriggerChildren(ctx context.Context, runID string, req runs.ChildrenRequest) (runs.ChildrenResult, error)
	// SessionInput returns the records of the run's input after seq after,
	// waiting a while for some (none: ask again).
	SessionInput(ctx context.Context, runID string, after int64) ([]runs.Record, error)
	// AppendOutput appends to the run's output (ctx.session.output);
	// an id makes the append idempotent.
	AppendOutput(ctx context.Context, runID, id string, data json.RawMessage) (runs.Record, error)
	// SetMetadata sets a key of the run's metadata (ctx.metadata.set).
	SetMetadata(ctx context.Context, runID, key string, value json.RawMessage) error
	// PutCheckpoint stores a sealed checkpoint of a run the worker holds,
	// read from r to its end, under checkpointID; it returns the bytes
	// stored.
	PutCheckpoint(ctx context.Context, runID, checkpointID string, r io.Reader) (int64, error)
	// GetCheckpoint streams a recorded checkpoint of a run the worker
	// holds, sealed as stored. The caller closes it.
	GetCheckpoint(ctx context.Context, runID, checkpointID string) (io.ReadCloser, error)
	// Park records req for a WAITING run the worker holds: with a
	// checkpoint, the run is parked (no worker holds it; when its wait is
	// over it is queued again, and its lease carries the checkpoint).
	Park(ctx context.Context, runID string, req ParkRequest) error
	// RestoredCheckpoint records that a run the worker holds was restored
	// from checkpoint checkpointID: the run is no longer parked, and the
	// checkpoint is kept for a retry should this worker be lost.
	RestoredCheckpoint(ctx context.Context, runID, checkpointID string) error
	// PutWorkspaceSnapshot stores a sealed snapshot of workspace wsID,
	// read from r to its end, as the workspace's snapshot seq, provided
	// the workspace is on the worker's host and its latest snapshot is
	// seq-1 (else a conflict, and nothing is kept); the snapshot it
	// replaces is deleted.
	PutWorkspaceSnapshot(ctx context.Context, workerID, wsID string, seq int64, r io.Reader) (workspaces.Snapshot, error)
	// GetWorkspaceSnapshot streams snapshot seq of workspace wsID, sealed
	// as stored, provided it is the latest and the workspace is on the
	// worker's host. The caller closes it.
	GetWorkspaceSnapshot(ctx context.Context, workerID, wsID string, seq int64) (io.ReadCloser, error)
	// PutWorkspaceCheckpoint stores the sealed checkpoint of workspace
	// wsID's sandbox, which the worker is pausing, read from r to its
	// end, as blob checkpointID (workspaces.CheckpointPrefix); the
	// workspace must be on the worker's host and not paused. It returns
	// the bytes stored.
	PutWorkspaceCheckpoint(ctx context.Context, workerID, wsID, checkpointID string, r io.Reader) (int64, error)
	// GetWorkspaceCheckpoint streams the checkpoint of paused workspace
	// wsID, sealed as stored, to the worker resuming it (the workspace is
	// on its host). The caller closes it.
	GetWorkspaceCheckpoint(ctx context.Context, workerID, wsID, checkpointID string) (io.ReadCloser, error)
}

// Config wires a Worker.
type Config struct {
	ID      string
	DataDir string // workspaces and per-run files
	Slots   int    // runs executed at once
	// WorkspaceIdle is how long a workspace's sandbox for direct
	// operations stays up after its last one (default DefaultWorkspaceIdle).
	WorkspaceIdle time.Duration
	// ShellIdle is how long a workspace's shell session lives past its
	// last request (default DefaultShellIdle); an open session keeps the
	// workspace's sandbox up.
	ShellIdle time.Duration
	// KeepMoved is how long the worker keeps its copy of a workspace that
	// moved to another host after the copy was last saved or restored
	// (an older version, should the newer snapshot be lost); 0: it
	// removes the copy at its next sweep. See dropMoved.
	KeepMoved time.Duration
	Runtime   sandbox.Runtime
	// BuildRuntime, if set, runs image build steps in place of Runtime,
	// whose tier runs none (tiers.SelectBuild); the build logs say so.
	// Run closes it with Runtime.
	BuildRuntime sandbox.Runtime
	Images       *images.Resolver
	Control      ControlPlane
	Logger       *slog.Logger
	// Adapter is the guest adapter bundle (tsbundle.Adapter()).
	Adapter []byte
	// CancelPoll is how often a running run's status is checked.
	CancelPoll time.Duration
	// Capabilities are reported with every lease; the control plane only
	// hands this worker runs that fit them. Zero CPUs or memory means this
	// machine's.
	Capabilities workers.Capabilities
	// Heartbeat is how often the worker reports it is alive (default 10s).
	Heartbeat time.Duration
	// Warm is how many sandboxes (per image and resources, most recently
	// used first) are kept booted ahead of runs, adapter started; 0 boots
	// every sandbox on demand.
	Warm int
	// Network is the sandboxes' egress (nil: loopback only). New sets its
	// Report to record denials in the runs' events.
	Network *network.Config
	// WorkspaceQuota, if positive, limits each run's workspace to that
	// many bytes: the workspace is then a disk of its own (package disk),
	// kept after the run as workspaces/<run id>.img.
	WorkspaceQuota int64
	// RootSize bounds the writable root of a sandbox whose task declares
	// no rootSize (sandbox.Spec.RootSizeBytes; 0: sandbox.DefaultRootSize).
	RootSize int64
	// LayerCacheMax bounds the image layer cache: after runs, the least
	// recently used layers no sandbox runs on are removed until it fits
	// (0: no bound).
	LayerCacheMax int64
	// ExtraCACerts, if set, is a PEM file of CA certificates that build
	// steps trust besides their image's (Node.js tools, through
	// NODE_EXTRA_CA_CERTS): for a TLS-inspecting egress proxy.
	ExtraCACerts string
	// ParkAfter: a run that has waited this long is parked when the
	// runtime is a sandbox.Checkpointer (see park.go); 0: never. Other
	// tiers keep the sandbox up and say so in the run's events.
	ParkAfter time.Duration
	// CheckpointKey seals checkpoints; required to park.
	CheckpointKey *checkpoints.Key
}

// Worker executes runs.
type Worker struct {
	cfg    Config
	traits sandbox.Traits // the runtime's (diskguest.go)
	log    *slog.Logger
	wg     sync.WaitGroup
	bg     background // work no request waits for; Run stops it last
	warm   *warmPool
	runCtx context.Context // Run's context: owns background boots
	boxes  sync.Map        // sandbox id → *booted, while the sandbox exists
	disks  *disk.Factory   // workspace disks, under a quota
	// sized: disk factories for workspaces with their own quota (see
	// disksFor), by size.
	// keptMoved: workspaces that moved away whose copy here is kept
	// (changes no snapshot holds), warned of once.
	keptMoved sync.Map
	sizedMu   sync.Mutex
	sized     map[int64]*disk.Factory
	nodeOK    sync.Map // image digest → its node's version, once checked

	gcMu   sync.Mutex
	gcLast time.Time // when the layer cache was last collected

	opMu    sync.Mutex
	opBoxes map[string]*opBox // workspace id → its direct-operations sandbox
	// opStarting: workspace id → closed once its sandbox started (or
	// failed to); openOpBox.
	opStarting map[string]chan struct{}
	opPool     opPool   // sandboxes started ahead for new workspaces
	wsRuns     sync.Map // workspace id → the run holding it here
	wsLocks    sync.Map // workspace id → *sync.Mutex (lockWorkspace)
	paused     sync.Map // workspace id → when it was paused here (zero: under way; see pausing)

	probe probe // runs in flight and the last heartbeat (ready.go)
}

// New validates cfg and returns a worker.
func New(cfg Config) (*Worker, error) {
	if cfg.ID == "" || cfg.DataDir == "" || cfg.Runtime == nil || cfg.Images == nil || cfg.Control == nil || len(cfg.Adapter) == 0 {
		return nil, errors.New("worker: ID, DataDir, Runtime, Images, Control and Adapter are required")
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 2
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	if cfg.CancelPoll == 0 {
		cfg.CancelPoll = 150 * time.Millisecond
	}
	if cfg.WorkspaceIdle <= 0 {
		cfg.WorkspaceIdle = DefaultWorkspaceIdle
	}
	if cfg.ShellIdle <= 0 {
		cfg.ShellIdle = DefaultShellIdle
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Capabilities = withHostDefaults(cfg.Capabilities, cfg.Runtime, cfg.Images, cfg.Slots, cfg.Logger)
	if cfg.Warm < 0 {
		return nil, errors.New("worker: Warm must not be negative")
	}
	if _, ok := cfg.Runtime.(sandbox.Checkpointer); ok && cfg.ParkAfter > 0 && cfg.CheckpointKey == nil {
		return nil, errors.New("worker: parking (ParkAfter) needs a CheckpointKey")
	}
	for _, d := range []string{"workspaces", "booted", "staging"} {
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, d), 0o755); err != nil {
			return nil, fmt.Errorf("worker data dir: %w", err)
		}
	}
	if cfg.Capabilities.Host == "" {
		h, err := hostID(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		cfg.Capabilities.Host = h
	}
	traits := sandbox.TraitsOf(cfg.Runtime)
	if traits.DiskGuest && cfg.WorkspaceQuota <= 0 {
		return nil, fmt.Errorf("worker: the %s tier takes every workspace as a disk of its own, so it needs a workspace quota (HELMR_WORKSPACE_QUOTA, 10Gi by default; not 0)", cfg.Runtime.Name())
	}
	if cfg.WorkspaceQuota > 0 {
		if err := disk.Check(); err != nil {
			return nil, fmt.Errorf("worker: a workspace quota needs %w (or set the quota to 0)", err)
		}
	}
	sweepBooted(filepath.Join(cfg.DataDir, "booted"), cfg.Logger)
	sweepStaging(filepath.Join(cfg.DataDir, "staging"), cfg.Logger)
	w := &Worker{cfg: cfg, traits: traits, log: cfg.Logger.With("worker_id", cfg.ID), warm: newWarmPool(cfg.Warm), runCtx: context.Background(), opBoxes: map[string]*opBox{},
		opStarting: map[string]chan struct{}{}}
	if cfg.Images.Runner == nil {
		sr, err := NewStepRunner(cfg.Runtime, cfg.BuildRuntime, cfg.Network, cfg.ExtraCACerts, cfg.DataDir, w.log)
		if err != nil {
			return nil, err
		}
		cfg.Images.Runner = sr
	}
	if cfg.WorkspaceQuota > 0 {
		w.disks = disk.NewFactory(filepath.Join(cfg.DataDir, "disks"), cfg.WorkspaceQuota)
	}
	if cfg.Network != nil {
		cfg.Network.Report = w.reportDenial
		cfg.Network.Notice = w.reportNotice
	}
	return w, nil
}

// disksFor returns the factory of a new workspace's disk: of its own
// quota if it has one (quota bytes), else the worker's (nil: the worker
// has no quota, the workspace is a plain directory).
func (w *Worker) disksFor(quota int64) (*disk.Factory, error) {
	if quota == 0 || (w.disks != nil && w.disks.Size == quota) {
		return w.disks, nil
	}
	w.sizedMu.Lock()
	defer w.sizedMu.Unlock()
	if f := w.sized[quota]; f != nil {
		return f, nil
	}
	if err := disk.Check(); err != nil {
		return nil, fmt.Errorf("the workspace has a quota of %d bytes, which this worker cannot enforce: it needs %w", quota, err)
	}
	if w.sized == nil {
		w.sized = map[int64]*disk.Factory{}
	}
	f := disk.NewFactory(filepath.Join(w.cfg.DataDir, "disks"), quota)
	w.sized[quota] = f
	return f, nil
}

// sweepStaging removes what a previous worker left in the staging
// directory: checkpoint images and archives in the clear, of parks and
// restores it did not finish, and workspace snapshots being restored or
// looked at (a workspace image mounted read-only, unmounted first).
func sweepStaging(dir string, log *slog.Logger) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), "look-") {
			if err := (&disk.Disk{Dir: p}).Close(); err != nil {
				log.Warn("unmount a stale workspace look", "path", e.Name(), "err", err)
				continue
			}
		}
		if err := os.RemoveAll(p); err != nil {
			log.Warn("remove stale checkpoint staging", "path", e.Name(), "err", err)
		}
	}
}

// sweepBooted removes the booted-sandbox directories a previous worker on
// this data dir left behind (their sandboxes died with it), unmounting
// their workspace disks first.
func sweepBooted(dir string, log *slog.Logger) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if err := (&disk.Disk{Dir: filepath.Join(p, "workspace")}).Close(); err != nil {
			log.Warn("unmount a stale workspace disk", "dir", p, "err", err)
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			log.Warn("remove a stale booted sandbox", "dir", p, "err", err)
		}
	}
}

// Layer cache collection: at most this often, sparing layers used this
// recently.
const (
	collectEvery = time.Minute
	collectGrace = 10 * time.Minute
)

// maybeCollect starts a layer cache collection, and removes the files of
// deleted workspaces, unless that ran recently.
func (w *Worker) maybeCollect() {
	w.gcMu.Lock()
	if time.Since(w.gcLast) < collectEvery {
		w.gcMu.Unlock()
		return
	}
	w.gcLast = time.Now()
	w.gcMu.Unlock()
	w.bg.Go(w.sweepWorkspaces)
	if w.cfg.LayerCacheMax <= 0 {
		return
	}
	var inUse []string
	w.boxes.Range(func(_, v any) bool {
		inUse = append(inUse, v.(*booted).layers...)
		return true
	})
	w.bg.Go(func() {
		st, err := w.cfg.Images.Collect(w.cfg.LayerCacheMax, inUse, collectGrace)
		if err != nil {
			w.log.Warn("collect image layers", "err", err)
		} else if st.Removed > 0 {
			w.log.Info("collected image layers", "removed", st.Removed, "freed_mib", st.RemovedBytes>>20, "kept_mib", st.KeptBytes>>20)
		}
	})
}

// reportDenial records an egress denial on the sandbox it happened in;
// the run that sandbox serves lists them in its events when it ends.
func (w *Worker) reportDenial(sandboxID string, d network.Denial) {
	if v, ok := w.boxes.Load(sandboxID); ok {
		b := v.(*booted)
		b.mu.Lock()
		b.denials = append(b.denials, d)
		b.mu.Unlock()
	}
}

// reportNotice keeps a credential event of a run's sandbox for the run's
// events, and logs those of other sandboxes (workspaces, builds).
func (w *Worker) reportNotice(sandboxID string, n network.Notice) {
	if v, ok := w.boxes.Load(sandboxID); ok {
		b := v.(*booted)
		b.mu.Lock()
		b.notices = append(b.notices, n)
		b.mu.Unlock()
		return
	}
	w.log.Info("egress credential notice", "sandbox", sandboxID, "secret", n.Secret, "host", n.Host, "kind", n.Kind, "message", n.Message)
}

// hostID returns the identity of the host the worker keeps workspaces on:
// made once per data dir (the machine's name and random bytes, so two data
// dirs on one machine differ) and kept in it, so it survives restarts.
func hostID(dataDir string) (string, error) {
	p := filepath.Join(dataDir, "host-id")
	if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	name, _ := os.Hostname()
	rnd := make([]byte, 6)
	_, _ = rand.Read(rnd)
	id := name + "-" + hex.EncodeToString(rnd)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("worker host id: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("worker host id: %w", err)
	}
	return id, nil
}

// sweepWorkspaces removes the files of the workspaces this worker holds
// that the control plane says were deleted (a workspace an unfinished
// run holds cannot be deleted, so none of these is in use), and its
// copies of workspaces that moved to another host, where their files
// are a snapshot this worker uploaded or restored, unchanged since: a
// copy with changes no snapshot holds is kept, saying so (see dropMoved).
func (w *Worker) sweepWorkspaces() {
	ents, err := os.ReadDir(filepath.Join(w.cfg.DataDir, "workspaces"))
	if err != nil {
		return
	}
	var ids []string
	seen := map[string]bool{}
	for _, e := range ents {
		id := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".img"), ".seq")
		if strings.HasPrefix(id, workspaces.Prefix) && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := map[string]localCopy{} // a copy used while the control plane answers is not dropped
	for _, id := range ids {
		before[id] = w.readCopy(id)
	}
	gone, moved, err := w.cfg.Control.StaleWorkspaces(ctx, w.cfg.Capabilities.Host, ids)
	if err != nil {
		w.log.Warn("ask which workspaces were deleted or moved", "err", err)
		return
	}
	for _, id := range moved {
		w.dropMoved(ctx, id, before[id])
	}
	for _, id := range gone {
		if err := w.dropLocalFiles(id); err != nil {
			w.log.Warn("remove a deleted workspace", "workspace_id", id, "err", err)
			continue
		}
		w.log.Info("removed a deleted workspace", "workspace_id", id)
	}
}

// WorkspaceDir is where a workspace (by ID; a run without one: by the
// run's ID) lives on this worker: a directory, or under a workspace quota
// the filesystem image WorkspaceDir(id)+".img".
func (w *Worker) WorkspaceDir(id string) string {
	return filepath.Join(w.cfg.DataDir, "workspaces", id)
}

// workspaceOf is the ID a run's workspace is kept under.
func workspaceOf(r runs.Run) string {
	if r.WorkspaceID != "" {
		return r.WorkspaceID
	}
	return r.ID
}

// existingWorkspace returns the kept files of workspace id on this worker
// (its image, or its directory), or "" when it has none yet.
func (w *Worker) existingWorkspace(id string) string {
	for _, p := range []string{w.WorkspaceDir(id) + ".img", w.WorkspaceDir(id)} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// closer is the optional capability of runtimes that hold resources
// between sandboxes (the process tier's warm pool).
type closer interface {
	Close(ctx context.Context) error
}

// Run leases and executes runs until ctx ends, then waits for the runs in
// flight to finish (their sandboxes are destroyed when ctx ends) and closes
// the runtime.
func (w *Worker) Run(ctx context.Context) error {
	slots := make(chan struct{}, w.cfg.Slots)
	w.runCtx = ctx
	w.wg.Add(3)
	go func() {
		defer w.wg.Done()
		w.heartbeat(ctx)
	}()
	go func() {
		defer w.wg.Done()
		w.serveOps(ctx)
	}()
	go func() {
		defer w.wg.Done()
		w.sweepWorkspaces() // what was deleted while the worker was away
	}()
	defer func() {
		w.closeWarm(context.WithoutCancel(ctx))
		w.wg.Wait()
		w.bg.Stop() // after wg: its work stops starting new background work
		for _, rt := range []sandbox.Runtime{w.cfg.Runtime, w.cfg.BuildRuntime} {
			if c, ok := rt.(closer); ok {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				if err := c.Close(cctx); err != nil {
					w.log.Warn("close runtime", "tier", rt.Name(), "err", err)
				}
				cancel()
			}
		}
	}()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		lease, err := w.cfg.Control.Lease(ctx, w.cfg.ID, w.cfg.Capabilities)
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return nil
			}
			if !errors.Is(err, ErrNoWork) {
				w.log.Warn("lease failed", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer func() { <-slots }()
			w.probe.busy.Add(1)
			defer w.probe.busy.Add(-1)
			w.execute(ctx, lease)
		}()
	}
}

// heartbeat reports the worker alive every Heartbeat until ctx ends.
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		err := w.cfg.Control.Heartbeat(ctx, w.cfg.ID, w.cfg.Capabilities)
		w.probe.beat(err)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
