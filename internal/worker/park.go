package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/store"
)

// Parking: a run that has waited ParkAfter is parked when the worker's
// runtime can checkpoint (sandbox.Checkpointer). The wait's handler asks
// runTask, which owns the sandbox (tryPark → parkRequest); runTask
// checkpoints the sandbox into the staging directory, unmounts the
// workspace disk, streams both as one archive sealed under the checkpoint
// key to the control plane, records the checkpoint (Park) and ends
// without an outcome: the run stays WAITING, no worker holds it, and its
// slot is free. When the wait is over the control plane queues the run
// again; the lease that carries the checkpoint restores it (restore.go).

// errParked ends the wait of a run that was parked: nobody answers the
// adapter's request here.
var errParked = errors.New("run parked")

// parkRequest asks runTask to park the run while the adapter waits on
// waitpoint for its request requestID; runTask answers on done (nil:
// parked).
type parkRequest struct {
	waitpointID string
	requestID   int64
	done        chan error
}

// tried reports whether a wait of the run already tried to park it, and
// marks that one has.
func (rw *runWaits) tried() bool {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	t := rw.parkTried
	rw.parkTried = true
	return t
}

// tryPark asks for the run to be parked and reports whether it was. A
// runtime that cannot checkpoint leaves the sandbox up and says so in the
// run's events.
func (rw *runWaits) tryPark(ctx context.Context, waitpointID string, reqID int64) bool {
	if rw.park == nil {
		note := runs.SystemData{
			Message: fmt.Sprintf("not parked: the %s tier cannot checkpoint, so the sandbox stays up (holding its slot) while the run waits", rw.w.cfg.Runtime.Name()),
			Attrs:   map[string]string{"parked": "false", "tier": rw.w.cfg.Runtime.Name()},
		}
		if _, ok := rw.w.cfg.Runtime.(sandbox.Checkpointer); ok {
			note.Message = "not parked: this worker has no checkpoint key; the sandbox stays up while the run waits"
		}
		if err := rw.w.cfg.Control.Park(ctx, rw.runID, ParkRequest{Note: note}); err != nil {
			rw.w.log.Warn("note an unparked wait", "run_id", rw.runID, "err", err)
		}
		return false
	}
	rw.mu.Lock()
	alone := rw.waits == 1
	rw.mu.Unlock()
	if !alone {
		return false // the task waits on several things at once: keep it up
	}
	pr := &parkRequest{waitpointID: waitpointID, requestID: reqID, done: make(chan error, 1)}
	select {
	case rw.park <- pr:
	case <-ctx.Done():
		return false
	}
	select {
	case err := <-pr.done:
		if err != nil {
			rw.w.log.Warn("park run", "run_id", rw.runID, "err", err)
		}
		return err == nil
	case <-ctx.Done():
		return false
	}
}

// canPark reports whether runs of this worker park.
func (w *Worker) canPark() bool {
	_, ok := w.cfg.Runtime.(sandbox.Checkpointer)
	return ok && w.cfg.ParkAfter > 0 && w.cfg.CheckpointKey != nil
}

// errSandboxGone marks a park that failed after the sandbox was
// checkpointed: the run cannot go on here.
var errSandboxGone = errors.New("the sandbox is gone")

// park checkpoints b's sandbox and workspace, seals and uploads them and
// records the checkpoint. An error wrapping errSandboxGone means the run
// is lost (its sandbox was saved, but not stored); any other leaves the
// sandbox running.
func (w *Worker) park(ctx context.Context, l Lease, b *booted, p prepared, pr *parkRequest, left time.Duration) error {
	ckr := w.cfg.Runtime.(sandbox.Checkpointer)
	if b.disk == nil {
		return errors.New("the workspace is a plain directory (HELMR_WORKSPACE_QUOTA=0): only workspace disks are parked")
	}
	id := checkpoints.Prefix + newCheckpointSuffix()
	stage := filepath.Join(w.cfg.DataDir, "staging", id)
	image := filepath.Join(stage, "image")
	if err := os.MkdirAll(image, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	began := time.Now()
	if err := ckr.Checkpoint(ctx, b.box, image); err != nil {
		if b.alive() {
			return err
		}
		return fmt.Errorf("%w: %w", errSandboxGone, err)
	}
	took := time.Since(began)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%w: the adapter's exec did not end after the checkpoint", errSandboxGone)
	}
	var cerr *sandbox.CheckpointedError
	if !errors.As(b.xerr, &cerr) {
		return fmt.Errorf("%w: the adapter ended with %v, not at the checkpoint", errSandboxGone, b.xerr)
	}
	// Nothing writes to the workspace any more: flush it to its image and
	// unmount it (an unmount that finds the disk still busy, as the
	// sandbox's last processes exit, is lazy and would flush later).
	// A disk guest's workspace is no host mount: its VM is gone, its
	// image written.
	if b.disk.Dir != "" {
		if err := syncFS(b.wsDir); err != nil {
			return fmt.Errorf("%w: flush the workspace: %w", errSandboxGone, err)
		}
	}
	if err := b.disk.Close(); err != nil {
		return fmt.Errorf("%w: %w", errSandboxGone, err)
	}
	ck := checkpoints.Checkpoint{
		ID: id, RunID: l.Run.ID, WaitpointID: pr.waitpointID, ExecID: cerr.ExecID, RequestID: pr.requestID,
		Arch: w.cfg.Capabilities.Arch, Tier: w.cfg.Runtime.Name(), Kernel: w.kernelDigest(), Rootfs: w.rootfsDigest(p),
		CreatedAt: store.Time(time.Now()),
	}
	began = time.Now()
	pm := parkManifest{SandboxID: b.id, MaxDurationLeftMs: left.Milliseconds()}
	if b.trust != nil {
		pm.CA = b.trust.ca.MarshalPEM()
	}
	if len(b.creds) > 0 {
		pm.Placeholders = map[string]string{}
		for _, c := range b.creds {
			pm.Placeholders[c.Name] = c.Placeholder
		}
	}
	n, err := w.upload(ctx, l.Run.ID, id, pm, image, b.disk.Image)
	if err != nil {
		return fmt.Errorf("%w: store checkpoint %s: %w", errSandboxGone, id, err)
	}
	ck.Size = n
	note := runs.SystemData{
		Message: fmt.Sprintf("parked: checkpoint %s (%d MiB): the sandbox was checkpointed in %s and is gone, its slot free; it is restored when waitpoint %s resolves",
			id, (n+1<<20-1)>>20, took.Round(time.Millisecond), pr.waitpointID),
		Attrs: map[string]string{"parked": "true", "checkpoint": id, "size": fmt.Sprint(n),
			"checkpointMs": fmt.Sprint(took.Milliseconds()), "uploadMs": fmt.Sprint(time.Since(began).Milliseconds())},
	}
	if err := w.cfg.Control.Park(ctx, l.Run.ID, ParkRequest{Checkpoint: &ck, Note: note}); err != nil {
		return fmt.Errorf("%w: record checkpoint %s: %w", errSandboxGone, id, err)
	}
	// The workspace lives in the checkpoint now; the restoring worker
	// writes it back.
	if err := os.Remove(b.disk.Image); err != nil {
		w.log.Warn("remove a parked run's workspace image", "run_id", l.Run.ID, "err", err)
	}
	w.log.Info("run parked", "run_id", l.Run.ID, "checkpoint", id, "bytes", n, "checkpoint_took", took)
	return nil
}

// upload streams the archive of a parked run, sealed, to the control
// plane; only sealed bytes leave the staging directory.
func (w *Worker) upload(ctx context.Context, runID, id string, m parkManifest, image, workspace string) (int64, error) {
	return w.putSealed(id, func(aw io.Writer) error { return writeArchive(aw, m, image, workspace) },
		func(r io.Reader) (int64, error) { return w.cfg.Control.PutCheckpoint(ctx, runID, id, r) })
}

// putSealed streams what write writes, sealed under the checkpoint key
// for sealID, to put, and returns what put returns: only sealed bytes
// leave the worker.
func (w *Worker) putSealed(sealID string, write func(io.Writer) error, put func(io.Reader) (int64, error)) (int64, error) {
	ar, aw := io.Pipe()
	sr, sw := io.Pipe()
	archived, sealed := make(chan error, 1), make(chan error, 1)
	go func() {
		err := write(aw)
		aw.CloseWithError(err)
		archived <- err
	}()
	go func() {
		_, err := checkpoints.Seal(sw, ar, *w.cfg.CheckpointKey, sealID)
		sw.CloseWithError(err)
		ar.CloseWithError(errors.Join(err, io.ErrClosedPipe))
		sealed <- err
	}()
	n, err := put(sr)
	sr.CloseWithError(errors.Join(err, io.ErrClosedPipe))
	aerr, serr := <-archived, <-sealed
	if aerr != nil && !errors.Is(aerr, io.ErrClosedPipe) {
		return 0, fmt.Errorf("archive: %w", aerr)
	}
	if serr != nil && !errors.Is(serr, io.ErrClosedPipe) {
		return 0, fmt.Errorf("seal: %w", serr)
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

func newCheckpointSuffix() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// kernelDigest is the capability digest of the runtime's guest kernel.
func (w *Worker) kernelDigest() string {
	if gk, ok := w.cfg.Runtime.(sandbox.GuestKernel); ok {
		return "kernel:" + gk.GuestKernelDigest()
	}
	return ""
}

// rootfsDigest is the capability digest of the built-in base p's image is
// built on, or "" for another base (a registry image, pinned by the run's
// image digest instead).
func (w *Worker) rootfsDigest(p prepared) string {
	d := "rootfs:" + p.img.Base + "@" + p.img.BaseDigest
	if slices.Contains(w.cfg.Capabilities.Digests, d) {
		return d
	}
	return ""
}

// syncFS flushes the filesystem holding dir (syncfs).
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
