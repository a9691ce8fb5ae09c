package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/waitpoints"
	"github.com/helmr/helmr/internal/workers"
	"github.com/helmr/helmr/internal/workspaces"
)

// Local is the in-process ControlPlane used by helmr dev.
type Local struct {
	Runs        *runs.Service
	Deployments deployments.Store
	// Workspaces, if set, says which workspaces were deleted.
	Workspaces workspaces.Store
	// Ops hands out direct operations on workspaces; nil: none come.
	Ops   *workspaces.Ops
	Waits *waitpoints.Service
	// Wait bounds one Lease call.
	Wait time.Duration
	// AwaitWait bounds one AwaitWaitpoint call (default 25s).
	AwaitWait time.Duration
	// Checkpoints and Blobs keep parked runs' checkpoints; nil: parking
	// is unavailable.
	Checkpoints checkpoints.Store
	Blobs       checkpoints.Blobs
	// Logger reports what a caller is not told (a replaced snapshot's
	// blob that could not be deleted); nil: discarded.
	Logger *slog.Logger
}

// Lease implements ControlPlane.
func (c *Local) Lease(ctx context.Context, workerID string, caps workers.Capabilities) (Lease, error) {
	queued, unsubscribe := c.Runs.Broker().SubscribeQueue()
	defer unsubscribe()
	wait := c.Wait
	if wait == 0 {
		wait = 5 * time.Second
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		run, err := c.Runs.Lease(ctx, workerID, caps)
		if err == nil {
			return c.leaseFor(ctx, run)
		}
		if !errors.Is(err, errdefs.ErrNotFound) {
			return Lease{}, err
		}
		select {
		case <-queued:
		case <-time.After(time.Second):
		case <-deadline.C:
			return Lease{}, ErrNoWork
		case <-ctx.Done():
			return Lease{}, ctx.Err()
		}
	}
}

func (c *Local) leaseFor(ctx context.Context, run runs.Run) (Lease, error) {
	dep, err := c.Deployments.GetDeployment(ctx, run.DeploymentID)
	if err != nil {
		return Lease{}, err
	}
	if run.Kind == runs.KindBuild {
		return Lease{Run: run, Build: &dep.Manifest}, nil
	}
	for _, t := range dep.Manifest.Tasks {
		if t.ID == run.TaskID {
			l := Lease{Run: run, Task: t}
			if run.WorkspaceID != "" && c.Workspaces != nil {
				ws, err := c.Workspaces.GetWorkspace(ctx, run.WorkspaceID)
				if err != nil {
					return Lease{}, err
				}
				l.Workspace = &ws
			}
			if c.Checkpoints != nil {
				cks, err := c.Checkpoints.ListCheckpoints(ctx, checkpoints.Filter{RunID: run.ID})
				if err != nil {
					return Lease{}, err
				}
				if len(cks) > 0 {
					l.Restore = &cks[len(cks)-1]
				}
			}
			return l, nil
		}
	}
	return Lease{}, errors.New("leased run's task is missing from its deployment")
}

// ReturnLease puts l's run back in the queue: the worker it was leased to
// went away before it could be told.
func (c *Local) ReturnLease(ctx context.Context, l Lease) error {
	return c.Runs.ReturnLease(ctx, l.Run)
}

// Files implements ControlPlane.
func (c *Local) Files(ctx context.Context, id string) (map[string][]byte, error) {
	return c.Deployments.GetDeploymentFiles(ctx, id)
}

// Started implements ControlPlane.
func (c *Local) Started(ctx context.Context, runID, workerID, tier string, note runs.SystemData) error {
	_, err := c.Runs.Started(ctx, runID, workerID, tier, note)
	return err
}

// Logs implements ControlPlane.
func (c *Local) Logs(ctx context.Context, runID string, lines []runs.LogData, at time.Time) error {
	return c.Runs.AppendLogs(ctx, runID, lines, at)
}

// Finish implements ControlPlane.
func (c *Local) Finish(ctx context.Context, runID string, o runs.Outcome) error {
	_, err := c.Runs.Finish(ctx, runID, o)
	return err
}

// Heartbeat implements ControlPlane.
func (c *Local) Heartbeat(ctx context.Context, workerID string, caps workers.Capabilities) error {
	return c.Runs.Heartbeat(ctx, workerID, caps)
}

// Status implements ControlPlane.
func (c *Local) Status(ctx context.Context, runID string) (runs.Status, error) {
	r, err := c.Runs.Get(ctx, runID)
	return r.Status, err
}

// RunSecrets implements ControlPlane.
func (c *Local) RunSecrets(ctx context.Context, runID string) (map[string]runs.BoundSecret, error) {
	return c.Runs.RunSecrets(ctx, runID)
}

// NextOp implements ControlPlane.
func (c *Local) NextOp(ctx context.Context, workerID, host string) (workspaces.Op, error) {
	if c.Ops == nil {
		<-ctx.Done()
		return workspaces.Op{}, workspaces.ErrNoOp
	}
	wait := c.Wait
	if wait == 0 {
		wait = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	op, err := c.Ops.NextFor(ctx, workerID, host)
	if err == nil && op.Workspace.Host != host && c.Workspaces != nil {
		// A new workspace, or one whose host is gone: its files are on
		// this worker's host from now on.
		if err := c.Workspaces.UseWorkspace(context.WithoutCancel(ctx), op.Workspace.ID, op.Workspace.LastRunID, host, time.Now()); err != nil {
			c.log().Error("record where a workspace is", "workspace_id", op.Workspace.ID, "err", err)
		}
		op.Workspace.Host = host
	}
	return op, err
}

func (c *Local) log() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// OpOutput implements ControlPlane.
func (c *Local) OpOutput(ctx context.Context, id string, out workspaces.OpOutput) error {
	if c.Ops == nil {
		return fmt.Errorf("workspace operation %s: %w", id, errdefs.ErrNotFound)
	}
	return c.Ops.Output(ctx, id, out)
}

// FinishOp implements ControlPlane.
func (c *Local) FinishOp(ctx context.Context, id string, res workspaces.OpResult) error {
	if c.Ops == nil {
		return fmt.Errorf("workspace operation %s: %w", id, errdefs.ErrNotFound)
	}
	return c.Ops.Finish(ctx, id, res)
}

var _ OpStreams = (*Local)(nil)

// OpInput implements OpStreams.
func (c *Local) OpInput(ctx context.Context, id string) (io.ReadCloser, error) {
	if c.Ops == nil {
		return nil, fmt.Errorf("workspace operation %s: %w", id, errdefs.ErrNotFound)
	}
	return c.Ops.Input(ctx, id)
}

// OpDeliver implements OpStreams.
func (c *Local) OpDeliver(ctx context.Context, id string, r io.Reader) error {
	if c.Ops == nil {
		return fmt.Errorf("workspace operation %s: %w", id, errdefs.ErrNotFound)
	}
	_, err := c.Ops.Deliver(ctx, id, r)
	return err
}

// StaleWorkspaces implements ControlPlane.
func (c *Local) StaleWorkspaces(ctx context.Context, host string, ids []string) (deleted, moved []string, err error) {
	if c.Workspaces == nil {
		return nil, nil, nil
	}
	if deleted, err = c.Workspaces.DeletedWorkspaces(ctx, ids); err != nil {
		return nil, nil, err
	}
	moved, err = c.Workspaces.MovedWorkspaces(ctx, host, ids)
	return deleted, moved, err
}

// BuildSecret implements ControlPlane.
func (c *Local) BuildSecret(ctx context.Context, runID, name string) (runs.BoundSecret, error) {
	return c.Runs.RunBuildSecret(ctx, runID, name)
}

// CreateWaitpoint implements ControlPlane.
func (c *Local) CreateWaitpoint(ctx context.Context, runID string, req waitpoints.CreateRequest) (waitpoints.Waitpoint, error) {
	return c.Waits.CreateForRun(ctx, runID, req)
}

// BeginWait implements ControlPlane.
func (c *Local) BeginWait(ctx context.Context, runID, waitpointID string) (waitpoints.Waitpoint, error) {
	return c.Waits.BeginWait(ctx, runID, waitpointID)
}

// AwaitWaitpoint implements ControlPlane.
func (c *Local) AwaitWaitpoint(ctx context.Context, runID, waitpointID string) (waitpoints.Waitpoint, error) {
	d := c.AwaitWait
	if d == 0 {
		d = 25 * time.Second
	}
	return c.Waits.Await(ctx, waitpointID, d)
}

// EndWait implements ControlPlane.
func (c *Local) EndWait(ctx context.Context, runID, waitpointID string) error {
	return c.Waits.EndWait(ctx, runID, waitpointID)
}

// TriggerChildren implements ControlPlane.
func (c *Local) TriggerChildren(ctx context.Context, runID string, req runs.ChildrenRequest) (runs.ChildrenResult, error) {
	return c.Runs.TriggerChildren(ctx, runID, req)
}

// SessionInput implements ControlPlane (long poll).
func (c *Local) SessionInput(ctx context.Context, runID string, after int64) ([]runs.Record, error) {
	d := c.AwaitWait
	if d == 0 {
		d = 25 * time.Second
	}
	return c.Runs.NextRecords(ctx, runID, runs.StreamInput, after, 100, d)
}

// AppendOutput implements ControlPlane.
func (c *Local) AppendOutput(ctx context.Context, runID, id string, data json.RawMessage) (runs.Record, error) {
	rec, _, err := c.Runs.Append(ctx, runID, runs.StreamOutput, id, data)
	return rec, err
}

// SetMetadata implements ControlPlane.
func (c *Local) SetMetadata(ctx context.Context, runID, key string, value json.RawMessage) error {
	return c.Runs.SetMetadata(ctx, runID, key, value)
}

var errNoBlobs = errors.New("this control plane keeps no checkpoints (no blob store)")

// PutCheckpoint implements ControlPlane.
func (c *Local) PutCheckpoint(ctx context.Context, runID, checkpointID string, r io.Reader) (int64, error) {
	if c.Blobs == nil || c.Checkpoints == nil {
		return 0, errNoBlobs
	}
	if ck, err := c.Checkpoints.GetCheckpoint(ctx, checkpointID); err == nil && ck.RunID != runID {
		return 0, fmt.Errorf("put checkpoint %s: belongs to another run: %w", checkpointID, errdefs.ErrConflict)
	}
	return c.Blobs.Put(ctx, checkpointID, r)
}

// GetCheckpoint implements ControlPlane.
func (c *Local) GetCheckpoint(ctx context.Context, runID, checkpointID string) (io.ReadCloser, error) {
	if c.Blobs == nil || c.Checkpoints == nil {
		return nil, errNoBlobs
	}
	ck, err := c.Checkpoints.GetCheckpoint(ctx, checkpointID)
	if err != nil {
		return nil, err
	}
	if ck.RunID != runID {
		return nil, fmt.Errorf("get checkpoint %s of run %s: %w", checkpointID, runID, errdefs.ErrNotFound)
	}
	return c.Blobs.Get(ctx, checkpointID)
}

// Park implements ControlPlane.
func (c *Local) Park(ctx context.Context, runID string, req ParkRequest) error {
	if req.Checkpoint == nil {
		return c.Runs.Note(ctx, runID, req.Note)
	}
	if c.Blobs == nil || c.Checkpoints == nil || c.Waits == nil {
		return errNoBlobs
	}
	ck := *req.Checkpoint
	if ck.RunID != runID {
		return fmt.Errorf("park run %s with a checkpoint of run %s: %w", runID, ck.RunID, errdefs.ErrInvalid)
	}
	r, err := c.Runs.Get(ctx, runID)
	if err != nil {
		return err
	}
	if r.Status != runs.StatusWaiting {
		return fmt.Errorf("park run %s: it is %s, not WAITING: %w", runID, r.Status, errdefs.ErrConflict)
	}
	rc, err := c.Blobs.Get(ctx, ck.ID)
	if err != nil {
		return fmt.Errorf("park run %s: checkpoint %s was not uploaded: %w", runID, ck.ID, err)
	}
	rc.Close()
	older, err := c.Checkpoints.ListCheckpoints(ctx, checkpoints.Filter{RunID: runID})
	if err != nil {
		return err
	}
	if err := c.Checkpoints.CreateCheckpoint(ctx, ck); err != nil {
		return fmt.Errorf("park run %s: %w: %w", runID, errdefs.ErrInvalid, err)
	}
	// The new checkpoint supersedes the one the run was restored from.
	for _, o := range older {
		if err := errors.Join(c.Checkpoints.DeleteCheckpoint(ctx, o.ID), c.Blobs.Delete(ctx, o.ID)); err != nil {
			return fmt.Errorf("park run %s: drop checkpoint %s it supersedes: %w", runID, o.ID, err)
		}
	}
	if err := c.Runs.Note(ctx, runID, req.Note); err != nil {
		return err
	}
	// Parked, the run holds no queue slot: another run of its queue may
	// start.
	if err := c.Runs.ReleaseSlot(ctx, runID); err != nil {
		return err
	}
	// The wait may have ended while the worker parked the run.
	wp, err := c.Waits.Get(ctx, ck.WaitpointID)
	if err != nil {
		return err
	}
	if wp.Status != waitpoints.StatusWaiting {
		_, err = c.Runs.Unpark(ctx, wp.ID, string(wp.Status))
	}
	return err
}

// RestoredCheckpoint implements ControlPlane: the run is no longer parked
// on checkpointID, which is kept (see checkpoints.Checkpoint.RestoredAt).
func (c *Local) RestoredCheckpoint(ctx context.Context, runID, checkpointID string) error {
	if c.Blobs == nil || c.Checkpoints == nil {
		return errNoBlobs
	}
	ck, err := c.Checkpoints.GetCheckpoint(ctx, checkpointID)
	if err != nil {
		return err
	}
	if ck.RunID != runID {
		return fmt.Errorf("restored checkpoint %s of run %s: %w", checkpointID, runID, errdefs.ErrNotFound)
	}
	return c.Checkpoints.RestoredCheckpoint(ctx, checkpointID, time.Now())
}

// snapshotTarget is workspace wsID if it is live and on the host of
// worker workerID (a live worker), with that host.
func (c *Local) snapshotTarget(ctx context.Context, workerID, wsID string) (workspaces.Workspace, string, error) {
	if c.Blobs == nil || c.Workspaces == nil {
		return workspaces.Workspace{}, "", errNoBlobs
	}
	host, err := c.Runs.WorkerHost(ctx, workerID)
	if err != nil {
		return workspaces.Workspace{}, "", err
	}
	ws, err := c.Workspaces.GetWorkspace(ctx, wsID)
	if err != nil {
		return ws, "", err
	}
	if ws.DeletedAt != nil {
		return ws, "", fmt.Errorf("workspace %s was deleted: %w", wsID, errdefs.ErrNotFound)
	}
	if ws.Host != host {
		return ws, "", fmt.Errorf("workspace %s is on host %q, not worker %s's %q: %w", wsID, ws.Host, workerID, host, errdefs.ErrConflict)
	}
	return ws, host, nil
}

// PutWorkspaceSnapshot implements ControlPlane.
func (c *Local) PutWorkspaceSnapshot(ctx context.Context, workerID, wsID string, seq int64, r io.Reader) (workspaces.Snapshot, error) {
	ws, host, err := c.snapshotTarget(ctx, workerID, wsID)
	if err != nil {
		return workspaces.Snapshot{}, err
	}
	if cur := latestSeq(ws); seq != cur+1 {
		return workspaces.Snapshot{}, fmt.Errorf("snapshot %d of workspace %s: its latest is %d: %w", seq, wsID, cur, errdefs.ErrConflict)
	}
	snap := workspaces.Snapshot{Seq: seq, BlobID: workspaces.SnapshotPrefix + newCheckpointSuffix()}
	if snap.Size, err = c.Blobs.Put(ctx, snap.BlobID, r); err != nil {
		return workspaces.Snapshot{}, err
	}
	snap.CreatedAt = time.Now().UTC()
	prev, err := c.Workspaces.RecordSnapshot(ctx, wsID, host, snap)
	if err != nil {
		if derr := c.Blobs.Delete(context.WithoutCancel(ctx), snap.BlobID); derr != nil {
			c.log().Warn("delete a refused workspace snapshot", "workspace_id", wsID, "blob", snap.BlobID, "err", derr)
		}
		return workspaces.Snapshot{}, err
	}
	if prev != nil {
		if err := c.Blobs.Delete(context.WithoutCancel(ctx), prev.BlobID); err != nil {
			c.log().Warn("delete a replaced workspace snapshot", "workspace_id", wsID, "blob", prev.BlobID, "err", err)
		}
	}
	return snap, nil
}

// GetWorkspaceSnapshot implements ControlPlane.
func (c *Local) GetWorkspaceSnapshot(ctx context.Context, workerID, wsID string, seq int64) (io.ReadCloser, error) {
	ws, _, err := c.snapshotTarget(ctx, workerID, wsID)
	if err != nil {
		return nil, err
	}
	if ws.Snapshot == nil || ws.Snapshot.Seq != seq {
		return nil, fmt.Errorf("snapshot %d of workspace %s: its latest is %d: %w", seq, wsID, latestSeq(ws), errdefs.ErrConflict)
	}
	return c.Blobs.Get(ctx, ws.Snapshot.BlobID)
}

// PutWorkspaceCheckpoint implements ControlPlane.
func (c *Local) PutWorkspaceCheckpoint(ctx context.Context, workerID, wsID, checkpointID string, r io.Reader) (int64, error) {
	ws, _, err := c.snapshotTarget(ctx, workerID, wsID)
	if err != nil {
		return 0, err
	}
	switch {
	case ws.Paused != nil:
		return 0, fmt.Errorf("workspace %s is paused already: %w", wsID, errdefs.ErrConflict)
	case !strings.HasPrefix(checkpointID, workspaces.CheckpointPrefix) || len(checkpointID) > 64:
		return 0, fmt.Errorf("checkpoint id %q: want %s…: %w", checkpointID, workspaces.CheckpointPrefix, errdefs.ErrInvalid)
	}
	return c.Blobs.Put(ctx, checkpointID, r)
}

// GetWorkspaceCheckpoint implements ControlPlane.
func (c *Local) GetWorkspaceCheckpoint(ctx context.Context, workerID, wsID, checkpointID string) (io.ReadCloser, error) {
	ws, _, err := c.snapshotTarget(ctx, workerID, wsID)
	if err != nil {
		return nil, err
	}
	if ws.Paused == nil || ws.Paused.CheckpointID != checkpointID || checkpointID == "" {
		return nil, fmt.Errorf("workspace %s is not paused as checkpoint %q: %w", wsID, checkpointID, errdefs.ErrConflict)
	}
	return c.Blobs.Get(ctx, checkpointID)
}

// latestSeq is the number of ws's latest snapshot, 0 if none.
func latestSeq(ws workspaces.Workspace) int64 {
	if ws.Snapshot == nil {
		return 0
	}
	return ws.Snapshot.Seq
}
