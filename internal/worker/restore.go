package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/helmr/helmr/internal/agent/channel"
	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/waitpoints"
)

// resume restores a parked run from its lease's checkpoint and lets the
// task go on from its wait; nil means canceled. The checkpoint must fit
// this worker (arch, tier, guest kernel, root filesystem) and open under
// its key, or the run fails as parked_wait naming why: a run is restored
// whole or not at all.
func (w *Worker) resume(ctx context.Context, l Lease, p prepared, files map[string][]byte, sec runSecrets) *runs.Outcome {
	ck := *l.Restore
	if why := w.restoreMismatch(ck); why != "" {
		return failed(runs.ClassParkedWait, "checkpoint %s cannot be restored on worker %s: %s", ck.ID, w.cfg.ID, why)
	}
	began := time.Now()
	b, err := w.restore(ctx, l, p, files, ck)
	if err != nil {
		return failed(runs.ClassParkedWait, "restore from checkpoint %s: %v", ck.ID, err)
	}
	took := time.Since(began)
	if err := sec.keep(b.saved); err != nil {
		b.destroy(context.WithoutCancel(ctx))
		return failed(runs.ClassParkedWait, "restore from checkpoint %s: %v", ck.ID, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := b.destroy(dctx); err != nil {
			w.log.Error("destroy sandbox failed", "run_id", l.Run.ID, "err", err)
		}
	}()
	note := runs.SystemData{
		Message: fmt.Sprintf("sandbox restored from checkpoint %s on the %s tier in %s (download, decrypt, restore)", ck.ID, w.cfg.Runtime.Name(), took.Round(time.Millisecond)),
		Attrs: map[string]string{"tier": w.cfg.Runtime.Name(), "worker": w.cfg.ID, "checkpoint": ck.ID, "sandbox": b.id,
			"restoreMs": fmt.Sprint(took.Milliseconds())},
	}
	if err := w.cfg.Control.Started(ctx, l.Run.ID, w.cfg.ID, w.cfg.Runtime.Name(), note); err != nil {
		if errors.Is(err, errdefs.ErrConflict) {
			return nil
		}
		return failed(runs.ClassGuestRuntime, "report start: %v", err)
	}
	if err := w.cfg.Control.RestoredCheckpoint(ctx, l.Run.ID, ck.ID); err != nil {
		w.log.Warn("record a checkpoint restored", "run_id", l.Run.ID, "checkpoint", ck.ID, "err", err)
	}
	return w.runTask(ctx, l, b, p, sec, &ck)
}

// restoreMismatch says why ck cannot be restored here, or "".
func (w *Worker) restoreMismatch(ck checkpoints.Checkpoint) string {
	if _, ok := w.cfg.Runtime.(sandbox.Checkpointer); !ok {
		return fmt.Sprintf("its tier (%s) cannot restore checkpoints, the checkpoint is of the %s tier", w.cfg.Runtime.Name(), ck.Tier)
	}
	if w.cfg.CheckpointKey == nil {
		return "it has no checkpoint encryption key (HELMR_CHECKPOINT_ENCRYPTION_KEY)"
	}
	return ck.Mismatch(w.cfg.Capabilities, w.cfg.Runtime.Name())
}

// restore downloads ck, opens it (authenticating every byte before any is
// used), writes the workspace image back, and restores the sandbox with
// the adapter's process re-attached.
func (w *Worker) restore(ctx context.Context, l Lease, p prepared, files map[string][]byte, ck checkpoints.Checkpoint) (*booted, error) {
	stage := filepath.Join(w.cfg.DataDir, "staging", ck.ID+"-restore")
	image := filepath.Join(stage, "image")
	_ = os.RemoveAll(stage)
	if err := os.MkdirAll(image, 0o700); err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	archive := filepath.Join(stage, "archive.tar")
	if err := w.download(ctx, l.Run.ID, ck.ID, archive); err != nil {
		return nil, err
	}
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	wsImage := w.WorkspaceDir(workspaceOf(l.Run)) + ".img"
	m, err := readArchive(f, image, wsImage)
	f.Close()
	if err != nil {
		return nil, err
	}
	b := &booted{id: m.SandboxID, ready: make(chan struct{}), done: make(chan struct{}),
		maxLeft: time.Duration(m.MaxDurationLeftMs) * time.Millisecond}
	b.dir = filepath.Join(w.cfg.DataDir, "booted", b.id)
	b.wsDir, b.helmrDir = filepath.Join(b.dir, "workspace"), filepath.Join(b.dir, "helmr")
	if err := os.MkdirAll(b.wsDir, 0o755); err != nil {
		return nil, err
	}
	d, err := w.attachDisk(wsImage, b.wsDir)
	if err != nil {
		b.removeDir()
		return nil, fmt.Errorf("attach the workspace: %w", err)
	}
	b.disk = d
	if err := writeFile(filepath.Join(b.helmrDir, "runtime", "adapter.mjs"), w.cfg.Adapter); err != nil {
		b.removeDir()
		return nil, err
	}
	if err := w.claim(ctx, l, b, files); err != nil {
		b.removeDir()
		return nil, err
	}
	// The restored sandbox trusts the CA it was checkpointed with, and
	// holds the placeholders it was given.
	var ca *network.CA
	if len(m.CA) > 0 {
		if ca, err = network.ParseCA(m.CA); err != nil {
			b.removeDir()
			return nil, fmt.Errorf("the checkpoint's certificate authority: %w", err)
		}
	}
	trust, err := w.trustFor(b.id, p.img, p.env, b.helmrDir, ca)
	if err != nil {
		b.removeDir()
		return nil, err
	}
	b.trust, b.saved = trust, m.Placeholders
	spec := p.spec
	spec.ID, spec.HelmrHost = b.id, b.helmrDir
	if err := w.handOver(&spec, b.disk, b.wsDir); err != nil {
		trust.release()
		b.removeDir()
		return nil, err
	}
	b.layers = spec.RootLayers
	w.boxes.Store(b.id, b)
	b.forget = func() { w.boxes.Delete(b.id); trust.release() }
	box, err := w.cfg.Runtime.(sandbox.Checkpointer).Restore(ctx, spec, image)
	if err != nil {
		b.forget()
		b.removeDir()
		return nil, err
	}
	b.box = box
	execCtx, cancel := context.WithCancelCause(context.Background())
	b.cancel = cancel
	go func() {
		defer close(b.done)
		b.exit, b.xerr = box.Exec(execCtx, sandbox.ExecRequest{
			Argv: []string{p.node, "/opt/helmr/runtime/adapter.mjs"}, Attach: ck.ExecID,
			Channel: true, OnOutput: b.output, OnMessage: b.message,
			Started: func(s sandbox.Sender) {
				b.sender = s
				close(b.ready)
			},
		})
	}()
	select {
	case <-b.ready:
		return b, nil
	case <-b.done:
		b.destroy(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("re-attach to the adapter: %w", b.xerr)
	}
}

// download fetches ck and writes its plaintext to path, removing it again
// unless every chunk authenticated.
func (w *Worker) download(ctx context.Context, runID, id, path string) error {
	rc, err := w.cfg.Control.GetCheckpoint(ctx, runID, id)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer rc.Close()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = checkpoints.Open(f, rc, *w.cfg.CheckpointKey, id)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		if errors.Is(err, checkpoints.ErrWrongKey) {
			return fmt.Errorf("%w: this worker's HELMR_CHECKPOINT_ENCRYPTION_KEY is not the one the run was parked with", err)
		}
		return err
	}
	return nil
}

// answer sends the restored adapter the result of the wait it was parked
// in (its request ck.RequestID).
func (rw *runWaits) answer(ctx context.Context, ck *checkpoints.Checkpoint) error {
	wp, err := rw.w.cfg.Control.AwaitWaitpoint(ctx, rw.runID, ck.WaitpointID)
	if err != nil {
		return err
	}
	if wp.Status == waitpoints.StatusWaiting {
		return fmt.Errorf("waitpoint %s is still WAITING", wp.ID)
	}
	var result any
	if wp.Kind != waitpoints.KindTimer {
		result = waitpoints.ResultOf(wp)
	}
	b, err := channel.Answer(ck.RequestID, result, nil)
	if err != nil {
		return err
	}
	rw.sendMu.Lock()
	defer rw.sendMu.Unlock()
	return rw.send(b)
}
