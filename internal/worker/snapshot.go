package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox/disk"
	"github.com/helmr/helmr/internal/workspaces"
)

// Workspace snapshots: after each run of a workspace, and when the
// sandbox for its direct operations stops, the worker seals its files (a
// disk image as a sparse archive, a directory as a tar; see snaparchive.go)
// under the checkpoint key and uploads them as the workspace's next
// snapshot, unless they are unchanged since the last one. Next to the
// files it keeps which snapshot they derive from (workspaces/<id>.seq).
// A worker that takes a run or operation of a workspace whose latest
// snapshot is newer than its copy (or that has none: the workspace moved
// here from a host that is gone) restores the snapshot first; a copy of an
// older snapshot is never used in its place.

// saveTimeout bounds sealing and uploading one snapshot; a worker that is
// stopping still saves the workspaces it holds.
const saveTimeout = 10 * time.Minute

// localCopy is what the worker knows of its copy of a workspace's files.
type localCopy struct {
	// Seq is the snapshot the files derive from (0: none).
	Seq int64 `json:"seq"`
	// Saved: the files are snapshot Seq as it was uploaded (or restored)
	// and, if Fingerprint is set, still have that fingerprint; otherwise
	// they changed since, or may have.
	Saved       bool   `json:"saved"`
	Fingerprint string `json:"fingerprint,omitempty"`
	// Used: a run or operations sandbox has had the files since the
	// record was written (see markUsed); a save clears it.
	Used bool `json:"used,omitempty"`
}

// markUsed records that a run or operations sandbox is about to have
// workspace id's files. The caller holds the workspace (lockWorkspace).
func (w *Worker) markUsed(id string) {
	c := w.readCopy(id)
	if c.Used {
		return
	}
	c.Used = true
	if err := w.writeCopy(id, c); err != nil {
		w.log.Warn("record a workspace copy", "workspace_id", id, "err", err)
	}
}

func (w *Worker) copyFile(id string) string { return w.WorkspaceDir(id) + ".seq" }

// readCopy returns what is recorded of the local copy of workspace id; a
// copy without a record (or an unreadable one) derives from no snapshot.
func (w *Worker) readCopy(id string) localCopy {
	var c localCopy
	data, err := os.ReadFile(w.copyFile(id))
	if err == nil && json.Unmarshal(data, &c) != nil {
		c = localCopy{}
	}
	return c
}

func (w *Worker) writeCopy(id string, c localCopy) error {
	data, _ := json.Marshal(c)
	tmp := w.copyFile(id) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, w.copyFile(id))
}

// stale reports whether a worker must restore snapshot snap rather than
// use its copy (held: it has files; local: the snapshot they derive from).
func stale(held bool, local localCopy, snap *workspaces.Snapshot) bool {
	return snap != nil && (!held || local.Seq < snap.Seq)
}

// lockWorkspace holds workspace id's files on this worker against other
// users (a run, an operations sandbox starting, a snapshot) until the
// returned function is called.
func (w *Worker) lockWorkspace(id string) func() {
	v, _ := w.wsLocks.LoadOrStore(id, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// fetchWorkspace makes sure this worker's copy of ws's files is its
// latest snapshot or newer, restoring the snapshot when the copy is older
// or missing. It says what it did ("" if nothing). On an error nothing
// local changed. The caller holds the workspace (lockWorkspace).
func (w *Worker) fetchWorkspace(ctx context.Context, ws workspaces.Workspace) (string, error) {
	held := w.existingWorkspace(ws.ID) != ""
	local := w.readCopy(ws.ID)
	if !stale(held, local, ws.Snapshot) {
		return "", nil
	}
	snap := *ws.Snapshot
	if w.cfg.CheckpointKey == nil {
		return "", fmt.Errorf("workspace %s moved here as snapshot %d, which this worker cannot open: it has no checkpoint encryption key (HELMR_CHECKPOINT_ENCRYPTION_KEY)", ws.ID, snap.Seq)
	}
	began := time.Now()
	if err := w.restoreSnapshot(ctx, ws.ID, snap); err != nil {
		return "", fmt.Errorf("restore workspace %s from snapshot %d: %w", ws.ID, snap.Seq, err)
	}
	why := "this worker had no copy of it"
	if held {
		why = fmt.Sprintf("this worker's copy was of snapshot %d", local.Seq)
	}
	msg := fmt.Sprintf("workspace %s restored from snapshot %d (%s sealed) in %s: %s", ws.ID, snap.Seq, sizeOf(snap.Size),
		time.Since(began).Round(time.Millisecond), why)
	w.log.Info("workspace restored from its snapshot", "workspace_id", ws.ID, "snapshot", snap.Seq, "bytes", snap.Size, "took", time.Since(began))
	return msg, nil
}

// restoreSnapshot downloads snapshot snap of workspace id, opens it
// (authenticating every chunk) and unpacks it in the staging directory;
// only once all of it authenticated does it replace the local copy.
func (w *Worker) restoreSnapshot(ctx context.Context, id string, snap workspaces.Snapshot) error {
	stage := filepath.Join(w.cfg.DataDir, "staging", id+"-restore-"+newCheckpointSuffix()[:8])
	if err := os.MkdirAll(stage, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	rc, err := w.cfg.Control.GetWorkspaceSnapshot(ctx, w.cfg.ID, id, snap.Seq)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer rc.Close()
	pr, pw := io.Pipe()
	opened := make(chan error, 1)
	go func() {
		err := checkpoints.Open(pw, rc, *w.cfg.CheckpointKey, workspaces.SealID(id, snap.Seq))
		pw.CloseWithError(err)
		opened <- err
	}()
	got, err := readSnapshot(pr, id, stage)
	if err == nil {
		_, err = io.Copy(io.Discard, pr) // the rest of the stream: it must authenticate too
	}
	pr.CloseWithError(errors.Join(err, io.ErrClosedPipe))
	if oerr := <-opened; oerr != nil && !errors.Is(oerr, io.ErrClosedPipe) {
		if errors.Is(oerr, checkpoints.ErrWrongKey) {
			return fmt.Errorf("%w: this worker's HELMR_CHECKPOINT_ENCRYPTION_KEY is not the one the snapshot was sealed with", oerr)
		}
		return oerr
	}
	if err != nil {
		return err
	}
	target := w.WorkspaceDir(id)
	if strings.HasSuffix(got, ".img") {
		target += ".img"
	}
	if err := w.dropLocalFiles(id); err != nil {
		return err
	}
	if err := os.Rename(got, target); err != nil {
		return err
	}
	return w.writeCopy(id, localCopy{Seq: snap.Seq, Saved: true})
}

// dropLocalFiles removes this worker's copy of workspace id (image or
// directory) and its record.
func (w *Worker) dropLocalFiles(id string) error {
	var errs []error
	for _, p := range []string{w.WorkspaceDir(id) + ".img", w.WorkspaceDir(id), w.copyFile(id)} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropMoved removes this worker's copy of workspace id, which moved to
// another host, once it was last saved or restored KeepMoved ago, if the
// copy is a snapshot as saved or restored here and unchanged since (no
// run or operation had it since, and the fingerprint, if the save could
// take one, is the same): the workspace went on from that snapshot or a
// later one. A copy with changes no snapshot holds (a run that stopped
// with its worker) is kept for whoever wants them, with a warning, once
// per worker process. was is the copy's record before the control plane
// said it moved: a copy used since is left alone.
func (w *Worker) dropMoved(ctx context.Context, id string, was localCopy) {
	if _, busy := w.wsRuns.Load(id); busy {
		return
	}
	w.opMu.Lock()
	_, open := w.opBoxes[id]
	w.opMu.Unlock()
	if open {
		return
	}
	unlock := w.lockWorkspace(id)
	defer unlock()
	files := w.existingWorkspace(id)
	if files == "" {
		_ = os.Remove(w.copyFile(id))
		return
	}
	local := w.readCopy(id)
	if local != was {
		return // used here since the control plane was asked
	}
	if fi, err := os.Stat(w.copyFile(id)); err == nil && time.Since(fi.ModTime()) < w.cfg.KeepMoved {
		return // kept a while: an older version, should the newer snapshot be lost
	}
	same := local.Saved && !local.Used
	if same && local.Fingerprint != "" {
		same = !strings.HasSuffix(files, ".img") || untilDetached(ctx, files) == nil
		if same {
			fp, err := w.fingerprintOf(files)
			same = err == nil && fp.Sum == local.Fingerprint
		}
	}
	if !same {
		if _, warned := w.keptMoved.LoadOrStore(id, true); !warned {
			w.log.Warn("a workspace moved to another host; this worker keeps its copy, whose changes no snapshot holds", "workspace_id", id, "files", files, "derives_from_snapshot", local.Seq)
		}
		return
	}
	if err := w.dropLocalFiles(id); err != nil {
		w.log.Warn("remove the copy of a workspace that moved", "workspace_id", id, "err", err)
		return
	}
	w.log.Info("removed the copy of a workspace that moved to another host", "workspace_id", id, "snapshot", local.Seq)
}

// saveWorkspace seals and uploads this worker's copy of workspace id as
// its next snapshot, unless it is unchanged since its last one. It
// returns the snapshot (nil if none was made) and what it did for a run's
// events. The caller holds the workspace (lockWorkspace) and nothing has
// its files mounted.
func (w *Worker) saveWorkspace(ctx context.Context, id string) (*workspaces.Snapshot, string, error) {
	files := w.existingWorkspace(id)
	if w.cfg.CheckpointKey == nil || files == "" || !strings.HasPrefix(id, workspaces.Prefix) {
		return nil, "", nil
	}
	if strings.HasSuffix(files, ".img") {
		if err := untilDetached(ctx, files); err != nil {
			return nil, "", fmt.Errorf("snapshot of workspace %s: %w", id, err)
		}
	}
	local := w.readCopy(id)
	began := time.Now()
	fp, fpErr := w.fingerprintOf(files)
	if fpErr != nil {
		w.log.Warn("fingerprint a workspace", "workspace_id", id, "err", fpErr)
	}
	if fpErr == nil && local.Saved && local.Seq > 0 && local.Fingerprint != "" && local.Fingerprint == fp.Sum {
		if local.Used {
			local.Used = false
			if err := w.writeCopy(id, local); err != nil {
				w.log.Warn("record a workspace copy", "workspace_id", id, "err", err)
			}
		}
		return nil, fmt.Sprintf("workspace %s unchanged since its snapshot %d: not uploaded again", id, local.Seq), nil
	}
	seq := local.Seq + 1
	var snap workspaces.Snapshot
	_, err := w.putSealed(workspaces.SealID(id, seq), func(aw io.Writer) error { return writeSnapshot(aw, id, files) },
		func(r io.Reader) (int64, error) {
			var err error
			snap, err = w.cfg.Control.PutWorkspaceSnapshot(ctx, w.cfg.ID, id, seq, r)
			return snap.Size, err
		})
	if err != nil {
		// Changed since the snapshot it derives from, and not saved: the
		// next session tries again.
		if werr := w.writeCopy(id, localCopy{Seq: local.Seq}); werr != nil {
			w.log.Warn("record a workspace copy", "workspace_id", id, "err", werr)
		}
		return nil, "", fmt.Errorf("snapshot %d of workspace %s: %w", seq, id, err)
	}
	c := localCopy{Seq: snap.Seq, Saved: true}
	if fpErr == nil && !fp.Racy {
		c.Fingerprint = fp.Sum
	}
	if err := w.writeCopy(id, c); err != nil {
		w.log.Warn("record a workspace copy", "workspace_id", id, "err", err)
	}
	took := time.Since(began)
	w.log.Info("workspace snapshot saved", "workspace_id", id, "snapshot", snap.Seq, "bytes", snap.Size, "took", took)
	return &snap, fmt.Sprintf("workspace %s saved as snapshot %d (%s sealed) in %s", id, snap.Seq, sizeOf(snap.Size), took.Round(time.Millisecond)), nil
}

// detachWait bounds how long a save waits for a workspace image's last
// mount to let go of it (a lazy unmount as the sandbox's last processes
// exit).
const detachWait = 10 * time.Second

// untilDetached waits until no loop device has img attached.
func untilDetached(ctx context.Context, img string) error {
	deadline := time.Now().Add(detachWait)
	for disk.Attached(img) {
		if time.Now().After(deadline) {
			return fmt.Errorf("its image is still mounted %s after its sandbox stopped", detachWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// fingerprintOf fingerprints a workspace's files: its directory, or its
// image mounted read-only for the look.
func (w *Worker) fingerprintOf(files string) (treeFingerprint, error) {
	if !strings.HasSuffix(files, ".img") {
		return fingerprint(files)
	}
	dir, err := os.MkdirTemp(filepath.Join(w.cfg.DataDir, "staging"), "look-")
	if err != nil {
		return treeFingerprint{}, err
	}
	defer os.Remove(dir)
	d, err := disk.Mount(files, dir, true)
	if err != nil {
		return treeFingerprint{}, err
	}
	fp, err := fingerprint(dir)
	return fp, errors.Join(err, d.Close())
}

// saveAfterRun saves the workspace of a run that ended (or was canceled,
// or stopped with the worker) on this worker, and returns the note for
// its events.
func (w *Worker) saveAfterRun(ctx context.Context, l Lease) *runs.SystemData {
	if l.Workspace == nil {
		return nil
	}
	held := w.existingWorkspace(l.Workspace.ID) != ""
	if stale(held, w.readCopy(l.Workspace.ID), l.Workspace.Snapshot) {
		return nil // not restored: the run never had the workspace here
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
	defer cancel()
	snap, msg, err := w.saveWorkspace(ctx, l.Workspace.ID)
	switch {
	case err != nil:
		w.log.Warn("save a workspace snapshot", "run_id", l.Run.ID, "workspace_id", l.Workspace.ID, "err", err)
		return &runs.SystemData{Message: fmt.Sprintf("workspace %s was not saved (%v): its changes are only on this worker until a later snapshot succeeds", l.Workspace.ID, err),
			Attrs: map[string]string{"workspace": l.Workspace.ID, "snapshot": "failed"}}
	case snap != nil:
		return &runs.SystemData{Message: msg, Attrs: map[string]string{"workspace": l.Workspace.ID, "snapshot": fmt.Sprint(snap.Seq),
			"size": fmt.Sprint(snap.Size)}}
	case msg != "":
		return &runs.SystemData{Message: msg, Attrs: map[string]string{"workspace": l.Workspace.ID, "snapshot": "unchanged"}}
	}
	return nil
}

// sizeOf writes n bytes in KiB or MiB.
func sizeOf(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
