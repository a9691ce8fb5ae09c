package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/workspaces"
)

// Pausing a workspace's sandbox (workspaces/pause.go): the worker holding
// it checkpoints it into the staging directory (the commands running in
// it are cut off: their operations answer Checkpointed), unmounts the
// workspace and saves it as its next snapshot, then streams the
// checkpoint, sealed, to the control plane; the workspace's files stay
// here as that snapshot. Resuming, on this worker or any that can
// restore the checkpoint: the snapshot is restored first if this
// worker's copy is older, then the checkpoint is downloaded, opened and
// restored with the workspace mounted, and the sandbox serves the
// workspace's operations as one started for them does.

// pauseFence is how long after a pause this worker refuses to start a
// sandbox for the workspace's operations: the control plane records the
// pause after the worker answered, and an operation that slipped in
// between must not find a fresh sandbox beside the checkpoint.
const pauseFence = 30 * time.Second

// pausedBox is what a resume restores an operations sandbox from.
type pausedBox struct {
	image    string // the checkpoint image (a directory)
	manifest parkManifest
	ca       *network.CA
}

// fenced reports whether op must not start a sandbox because its
// workspace is being paused here, or was within pauseFence and op was
// made before the pause was recorded (it still has the workspace on this
// host: a pause clears the host, a resume here goes through doResume,
// which lifts the fence).
func (w *Worker) fenced(op workspaces.Op) bool {
	return op.Workspace.Host == w.cfg.Capabilities.Host && w.pausing(op.Workspace.ID)
}

// pausing reports whether workspace id is being paused here, or was
// within pauseFence.
func (w *Worker) pausing(id string) bool {
	v, ok := w.paused.Load(id)
	if !ok {
		return false
	}
	at := v.(time.Time)
	if at.IsZero() || time.Since(at) < pauseFence {
		return true
	}
	w.paused.CompareAndDelete(id, v)
	return false
}

// doPause pauses the workspace's operations sandbox (op.Pause).
func (w *Worker) doPause(ctx context.Context, op workspaces.Op) workspaces.OpResult {
	id := op.Workspace.ID
	fail := func(format string, args ...any) workspaces.OpResult {
		msg := fmt.Sprintf("pause workspace %s: "+format, append([]any{id}, args...)...)
		w.log.Warn("pause a workspace sandbox", "workspace_id", id, "err", msg)
		return workspaces.OpResult{Error: msg}
	}
	if w.cfg.CheckpointKey == nil {
		return fail("this worker has no checkpoint encryption key (HELMR_CHECKPOINT_ENCRYPTION_KEY) to seal the workspace with")
	}
	ckr, canCheckpoint := w.cfg.Runtime.(sandbox.Checkpointer)
	if op.Pause.Memory && !canCheckpoint {
		return fail("the %s tier cannot checkpoint a sandbox's memory: pause without it (E2B: mode=\"filesystem\"), or run the workspace on a gvisor worker",
			w.cfg.Runtime.Name())
	}
	w.paused.Store(id, time.Time{})
	paused := false
	defer func() {
		if paused {
			w.paused.Store(id, time.Now()) // the fence: see pauseFence
		} else {
			w.paused.Delete(id) // nothing paused: the workspace goes on here
		}
	}()
	w.opMu.Lock()
	ob := w.opBoxes[id]
	delete(w.opBoxes, id)
	w.opMu.Unlock()

	p := workspaces.Pause{CreatedAt: time.Now().UTC()}
	if ob != nil && op.Pause.Memory {
		if ob.disk == nil {
			w.putBack(ob)
			return fail("its files are a plain directory (HELMR_WORKSPACE_QUOTA=0): only workspace disks are paused with memory")
		}
		var err error
		if p, err = w.checkpointOpBox(ctx, ckr, ob); err != nil {
			return fail("%v", err)
		}
		p.CreatedAt = time.Now().UTC()
	} else if ob != nil {
		ob.close(ctx)
	}
	// Save the files as the workspace's next snapshot (the pause goes
	// with it) while the checkpoint uploads.
	uploaded := make(chan error, 1)
	if p.CheckpointID != "" {
		go func() { uploaded <- w.uploadPause(ctx, id, ob, &p) }()
	} else {
		uploaded <- nil
	}
	unlock := w.lockWorkspace(id)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
	_, _, err := w.saveWorkspace(sctx, id)
	cancel()
	snapshot := w.readCopy(id).Seq
	unlock()
	uerr := <-uploaded
	p.Snapshot = snapshot
	if err != nil {
		res := fail("save its files: %v (the sandbox is stopped; its files stay on this worker)", err)
		if uerr == nil && p.CheckpointID != "" {
			res.Paused = &p // stored, but of no use: the control plane deletes it
		}
		return res
	}
	if uerr != nil {
		return fail("store its checkpoint: %v (the sandbox is gone; its files are snapshot %d)", uerr, p.Snapshot)
	}
	paused = true
	w.log.Info("workspace sandbox paused", "workspace_id", id, "checkpoint", p.CheckpointID, "snapshot", p.Snapshot, "bytes", p.Size)
	return workspaces.OpResult{Paused: &p, Host: w.cfg.Capabilities.Host}
}

// putBack returns ob to the workspace's operations: a pause that did not
// happen.
func (w *Worker) putBack(ob *opBox) {
	w.opMu.Lock()
	defer w.opMu.Unlock()
	if _, ok := w.opBoxes[ob.ws]; !ok {
		w.opBoxes[ob.ws] = ob
		return
	}
	w.bg.Go(func() { w.retireOpBox(context.Background(), ob) }) // a new one took its place
}

// checkpointOpBox checkpoints ob's sandbox into a staging directory it
// keeps in ob.dir's place until uploadPause, and unmounts the workspace.
// On an error the sandbox is either running as before (ob is put back) or
// gone and its workspace unmounted.
func (w *Worker) checkpointOpBox(ctx context.Context, ckr sandbox.Checkpointer, ob *opBox) (workspaces.Pause, error) {
	p := workspaces.Pause{CheckpointID: workspaces.CheckpointPrefix + newCheckpointSuffix(), Arch: w.cfg.Capabilities.Arch,
		Tier: w.cfg.Runtime.Name(), Kernel: w.kernelDigest(), Rootfs: ob.rootfs, Host: w.cfg.Capabilities.Host}
	stage := filepath.Join(w.cfg.DataDir, "staging", p.CheckpointID)
	if err := os.MkdirAll(filepath.Join(stage, "image"), 0o700); err != nil {
		w.putBack(ob)
		return p, err
	}
	began := time.Now()
	if err := ckr.Checkpoint(ctx, ob.box, filepath.Join(stage, "image")); err != nil {
		os.RemoveAll(stage)
		// A sandbox whose checkpoint failed may be gone: close it, and
		// the workspace's next operation starts a fresh one.
		ob.close(context.WithoutCancel(ctx))
		return p, fmt.Errorf("checkpoint its sandbox: %w (the sandbox was stopped)", err)
	}
	p.CheckpointMs = time.Since(began).Milliseconds()
	// Nothing writes to the workspace any more: flush it and let go.
	ob.box = nil
	// A disk guest's workspace is no host mount: its VM is gone, its
	// image written.
	if ob.wsHost != "" {
		if err := syncFS(ob.wsHost); err != nil {
			w.log.Warn("flush a paused workspace", "workspace_id", ob.ws, "err", err)
		}
	}
	ca := ob.caPEM()
	ob.close(context.WithoutCancel(ctx))
	ob.stage, ob.pausedCA = stage, ca
	return p, nil
}

// uploadPause seals and uploads ob's checkpoint (checkpointOpBox) as
// p.CheckpointID, and fills in p's size and timing.
func (w *Worker) uploadPause(ctx context.Context, id string, ob *opBox, p *workspaces.Pause) error {
	defer os.RemoveAll(ob.stage)
	began := time.Now()
	m := parkManifest{SandboxID: ob.id, CA: ob.pausedCA}
	image := filepath.Join(ob.stage, "image")
	n, err := w.putSealed(p.SealID(id), func(aw io.Writer) error { return writeArchive(aw, m, image, "") },
		func(r io.Reader) (int64, error) {
			return w.cfg.Control.PutWorkspaceCheckpoint(ctx, w.cfg.ID, id, p.CheckpointID, r)
		})
	if err != nil {
		return err
	}
	p.Size, p.UploadMs = n, time.Since(began).Milliseconds()
	return nil
}

// caPEM is the sandbox's certificate authority, as a checkpoint keeps it
// (nil: no network).
func (ob *opBox) caPEM() []byte {
	if ob.trust == nil {
		return nil
	}
	return ob.trust.ca.MarshalPEM()
}

// doResume restores a paused workspace's sandbox here (op.Resume) and
// keeps it for the workspace's operations.
func (w *Worker) doResume(ctx context.Context, op workspaces.Op) workspaces.OpResult {
	p := *op.Resume
	id := op.Workspace.ID
	fail := func(format string, args ...any) workspaces.OpResult {
		msg := fmt.Sprintf("resume workspace %s on worker %s: "+format, append([]any{id, w.cfg.ID}, args...)...)
		w.log.Warn("resume a workspace sandbox", "workspace_id", id, "err", msg)
		return workspaces.OpResult{Error: msg}
	}
	w.paused.Delete(id)
	if op.Workspace.Snapshot == nil && p.Snapshot != 0 || op.Workspace.Snapshot != nil && op.Workspace.Snapshot.Seq != p.Snapshot {
		return fail("its latest snapshot is not the one it was paused with (%d)", p.Snapshot)
	}
	if p.CheckpointID == "" {
		// Paused without memory: the next operation starts a sandbox on
		// the snapshot, as for any workspace.
		unlock := w.lockWorkspace(id)
		_, err := w.fetchWorkspace(ctx, op.Workspace)
		unlock()
		if err != nil {
			return fail("%v", err)
		}
		return workspaces.OpResult{Host: w.cfg.Capabilities.Host}
	}
	if why := w.restoreMismatch(p.Checkpoint()); why != "" {
		return fail("this worker cannot restore its checkpoint: %s", why)
	}
	stage := filepath.Join(w.cfg.DataDir, "staging", p.CheckpointID+"-restore")
	_ = os.RemoveAll(stage)
	from := &pausedBox{image: filepath.Join(stage, "image")}
	if err := os.MkdirAll(from.image, 0o700); err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(stage)
	began := time.Now()
	if err := w.downloadPause(ctx, id, p, stage, from); err != nil {
		return fail("%v", err)
	}
	ob, err := w.openOpBox(ctx, op, from)
	if err != nil {
		return fail("%v", err)
	}
	w.releaseOpBox(ob)
	w.log.Info("workspace sandbox resumed", "workspace_id", id, "checkpoint", p.CheckpointID, "sandbox", ob.id, "took", time.Since(began))
	return workspaces.OpResult{Host: w.cfg.Capabilities.Host}
}

// downloadPause fetches p's checkpoint, authenticates all of it, and
// unpacks it into from.
func (w *Worker) downloadPause(ctx context.Context, id string, p workspaces.Pause, stage string, from *pausedBox) error {
	rc, err := w.cfg.Control.GetWorkspaceCheckpoint(ctx, w.cfg.ID, id, p.CheckpointID)
	if err != nil {
		return fmt.Errorf("download its checkpoint: %w", err)
	}
	defer rc.Close()
	archive := filepath.Join(stage, "archive.tar")
	f, err := os.OpenFile(archive, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := checkpoints.Open(f, rc, *w.cfg.CheckpointKey, p.SealID(id)); err != nil {
		if errors.Is(err, checkpoints.ErrWrongKey) {
			return fmt.Errorf("%w: this worker's HELMR_CHECKPOINT_ENCRYPTION_KEY is not the one the workspace was paused with", err)
		}
		return fmt.Errorf("open its checkpoint: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if from.manifest, err = readArchive(f, from.image, ""); err != nil {
		return err
	}
	if len(from.manifest.CA) > 0 {
		if from.ca, err = network.ParseCA(from.manifest.CA); err != nil {
			return fmt.Errorf("the checkpoint's certificate authority: %w", err)
		}
	}
	return nil
}
