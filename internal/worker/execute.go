package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/agent/channel"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/disk"
)

// errCanceled is the cause of a run context cancelled by the user.
var errCanceled = errors.New("run canceled")

// errTimedOut is the cause of a run context that hit maxDuration.
var errTimedOut = errors.New("maxDuration exceeded")

// execute runs one leased run to its end and reports the outcome.
func (w *Worker) execute(ctx context.Context, l Lease) {
	log := w.log.With("run_id", l.Run.ID, "task_id", l.Run.TaskID, "kind", l.Run.Kind)
	var o *runs.Outcome
	if l.Run.Kind == runs.KindBuild {
		o = w.executeBuild(ctx, l)
	} else {
		o = w.executeTask(ctx, l)
	}
	if o == nil {
		return // canceled: the control plane already has the final state
	}
	// The outcome names this attempt on this worker, so that a late
	// report cannot end a retry another worker runs.
	o.WorkerID, o.Attempt = w.cfg.ID, max(l.Run.Attempt, 1)
	// Report with a fresh context: a shutting-down worker still records
	// how its runs ended.
	if err := w.report(context.WithoutCancel(ctx), func(ctx context.Context) error {
		return w.cfg.Control.Finish(ctx, l.Run.ID, *o)
	}); err != nil && !errors.Is(err, errdefs.ErrConflict) {
		log.Error("report outcome failed", "err", err)
	}
	log.Info("run finished", "status", o.Status)
	w.maybeCollect()
}

// reportFor bounds how long a worker tries to report a run's outcome
// through control plane outages (a replica or the database restarting).
const reportFor = 5 * time.Minute

// report calls send until it succeeds, fails for good (the control plane
// refused it: conflict, not found, invalid, unauthorized) or reportFor
// passes, with a backoff: an outcome that is never reported leaves its
// run started on a live worker, which nothing else would end.
func (w *Worker) report(ctx context.Context, send func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, reportFor)
	defer cancel()
	backoff := 100 * time.Millisecond
	for {
		actx, acancel := context.WithTimeout(ctx, 15*time.Second)
		err := send(actx)
		acancel()
		if err == nil || !transient(err) {
			return err
		}
		w.log.Warn("report to the control plane failed; trying again", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// transient reports whether err may pass: not a refusal.
func transient(err error) bool {
	for _, final := range []error{errdefs.ErrConflict, errdefs.ErrNotFound, errdefs.ErrInvalid, errdefs.ErrUnauthenticated, errdefs.ErrForbidden, errdefs.ErrTooLarge} {
		if errors.Is(err, final) {
			return false
		}
	}
	return true
}

func failed(class runs.FailureClass, format string, args ...any) *runs.Outcome {
	return &runs.Outcome{Status: runs.StatusFailed, Error: &runs.Error{Class: class, Message: fmt.Sprintf(format, args...)}}
}

// executeTask runs a task run holding its workspace on this worker, and
// saves the workspace (a snapshot) once the sandbox is gone, before the
// outcome is reported; nil means canceled.
func (w *Worker) executeTask(ctx context.Context, l Lease) *runs.Outcome {
	// The run holds its workspace here: direct operations on it wait, and
	// their sandbox (if up) lets go of it.
	wsID := workspaceOf(l.Run)
	w.wsRuns.Store(wsID, l.Run.ID)
	defer w.wsRuns.Delete(wsID)
	w.closeOpBox(ctx, wsID)
	unlock := w.lockWorkspace(wsID)
	defer unlock()
	o := w.attempt(ctx, l)
	if note := w.saveAfterRun(ctx, l); note != nil && o != nil {
		o.Notes = append(o.Notes, *note)
	}
	return o
}

// attempt prepares the run, claims a booted sandbox for it (or boots one),
// and runs the task; nil means canceled.
func (w *Worker) attempt(ctx context.Context, l Lease) (o *runs.Outcome) {
	var red *redactor
	defer func() { o = red.Outcome(o) }()
	files, err := w.cfg.Control.Files(ctx, l.Run.DeploymentID)
	if err != nil {
		return failed(runs.ClassImagePreparation, "fetch deployment %s: %v", l.Run.DeploymentID, err)
	}
	if l.Task.Sandbox == nil {
		return failed(runs.ClassImagePreparation, "task %s declares no sandbox", l.Task.ID)
	}
	build := newLogSink(w.cfg.Control, l.Run.ID, w.log)
	img, err := w.cfg.Images.Prepare(ctx, l.Task.Sandbox.Image, files, images.PrepareOptions{
		Scope:  l.Run.Project,
		Output: func(_ int, _ string, data []byte) { build.Write("build", data) },
		Secret: func(ctx context.Context, name string) (images.SecretValue, error) {
			v, err := w.cfg.Control.BuildSecret(ctx, l.Run.ID, name)
			return images.SecretValue{Value: v.Value, Egress: v.Egress}, err
		},
		BaseDigest: l.Run.Needs.BaseDigest,
	})
	build.Close()
	if err != nil {
		return failed(runs.ClassImagePreparation, "%v", err)
	}
	if want := l.Run.Needs.Image; want != "" && img.Digest != want {
		return failed(runs.ClassImagePreparation, "the image prepared here (%s, base %s@%s) is not the one built at deploy (%s): its base or sources changed; deploy again",
			img.Digest, img.Base, img.BaseDigest, want)
	}
	p, err := w.prepare(l, img, files)
	if err != nil {
		return failed(runs.ClassImagePreparation, "%v", err)
	}
	sec, err := w.secretsFor(ctx, l, p)
	if err != nil {
		return failed(runs.ClassImagePreparation, "%v", err)
	}
	red = sec.redact
	if l.Restore != nil {
		// The checkpoint holds the workspace as the run left it, which
		// derives from the snapshot the run started with.
		if l.Workspace != nil {
			if err := w.writeCopy(l.Workspace.ID, localCopy{Seq: latestSeq(*l.Workspace)}); err != nil {
				return failed(runs.ClassParkedWait, "record the workspace's copy: %v", err)
			}
		}
		return w.resume(ctx, l, p, files, sec)
	}
	var restored string
	if l.Workspace != nil {
		if restored, err = w.fetchWorkspace(ctx, *l.Workspace); err != nil {
			return failed(runs.ClassImagePreparation, "%v", err)
		}
		w.markUsed(l.Workspace.ID)
	}
	key := bootKey(w.cfg.Runtime.Name(), p)
	// A workspace that earlier runs used boots with its files; a new one
	// can take a sandbox booted ahead with a fresh workspace of the size
	// its quota asks for.
	var (
		b      *booted
		disks  *disk.Factory
		warmOK bool
	)
	existing := w.existingWorkspace(workspaceOf(l.Run))
	if existing == "" {
		quota := p.disk
		if l.Workspace != nil {
			quota = l.Workspace.QuotaBytes
		}
		var ahead *disk.Factory
		if disks, err = w.disksFor(quota); err == nil {
			ahead, err = w.disksFor(p.disk)
		}
		if err != nil {
			return failed(runs.ClassImagePreparation, "workspace %s: %v", workspaceOf(l.Run), err)
		}
		// A tier that gets the task through its agent takes a sandbox
		// booted ahead only for files it can place so.
		warmOK = disks == ahead && w.placeable(files)
	}
	warm := warmOK
	if warm {
		b = w.warm.claim(ctx, key)
	}
	if b == nil {
		warm = false
		if b, err = w.boot(ctx, key, p, existing, disks, files); err != nil {
			if errors.Is(err, images.ErrPreparation) {
				return failed(runs.ClassImagePreparation, "%v", err)
			}
			return failed(runs.ClassGuestRuntime, "start %s sandbox: %v", w.cfg.Runtime.Name(), err)
		}
	}
	w.refill(w.runCtx, key, p)
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), destroyTimeout)
		defer cancel()
		if err := b.destroy(dctx); err != nil {
			w.log.Error("destroy sandbox failed", "run_id", l.Run.ID, "err", err)
		}
		if o != nil {
			o.Notes = append(o.Notes, w.quotaNote(b.disk)...)
		}
	}()
	if err := w.claim(ctx, l, b, files); err != nil {
		return failed(runs.ClassImagePreparation, "%v", err)
	}
	note := w.startedNote(b, img.Digest, warm)
	if restored != "" {
		note.Message += "; " + restored
		note.Attrs["workspaceSnapshot"] = fmt.Sprint(l.Workspace.Snapshot.Seq)
	}
	secretsNote(&note, sec)
	if err := w.cfg.Control.Started(ctx, l.Run.ID, w.cfg.ID, w.cfg.Runtime.Name(), note); err != nil {
		if errors.Is(err, errdefs.ErrConflict) {
			return nil
		}
		return failed(runs.ClassGuestRuntime, "report start: %v", err)
	}
	return w.runTask(ctx, l, b, p, sec, nil)
}

// destroyTimeout bounds destroying a run's sandbox (a VM's Destroy also
// checks its workspace image).
const destroyTimeout = 30 * time.Second

// startedNote is the run's event saying where its sandbox started, and
// how strong a boundary that is.
func (w *Worker) startedNote(b *booted, image string, warm bool) runs.SystemData {
	tier := w.cfg.Runtime.Name()
	note := runs.SystemData{Message: "sandbox started on the " + tier + " tier", Attrs: map[string]string{
		"tier": tier, "worker": w.cfg.ID, "image": image, "sandbox": b.id, "warm": fmt.Sprint(warm),
	}}
	switch {
	case tier == "process":
		note.Message = "sandbox started on the process tier: weak isolation (shared kernel), for development and trusted code"
		note.Attrs["isolation"] = "weak"
	case w.traits.NoBoundary != "":
		note.Message += ": " + w.traits.NoBoundary
		note.Attrs["isolation"] = "none"
	}
	return note
}

// claim gives a booted sandbox to a run: its workspace becomes the run's
// workspace and the deployment's bundles appear under /opt/helmr/task.
func (w *Worker) claim(ctx context.Context, l Lease, b *booted, files map[string][]byte) error {
	if !b.taskPlaced {
		if err := w.placeTask(ctx, b, files); err != nil {
			return err
		}
	}
	if b.disk != nil {
		// The disk stays where the sandbox has it (mounted, or attached
		// to a disk guest); its image becomes the run's.
		img := w.WorkspaceDir(workspaceOf(l.Run)) + ".img"
		if b.disk.Image == img {
			return nil // the workspace's own disk, booted with it
		}
		if err := w.assignImage(b.disk, img); err != nil {
			return fmt.Errorf("assign workspace: %w", err)
		}
		return nil
	}
	dir := w.WorkspaceDir(workspaceOf(l.Run))
	if b.wsDir == dir {
		return nil
	}
	if err := os.Rename(b.wsDir, dir); err != nil {
		return fmt.Errorf("assign workspace: %w", err)
	}
	b.wsDir = dir
	return nil
}

type prepared struct {
	spec sandbox.Spec // without ID and host dirs, which booting fills in
	env  []string
	node string
	img  images.Image
	// disk is the size quota the sandbox declares for its workspaces
	// (0: the worker's); sandboxes booted ahead get a disk of it.
	disk int64
}

// prepare checks the image can run the task and derives the sandbox spec
// and environment shared by every run of this image and sandbox.
func (w *Worker) prepare(l Lease, img images.Image, files map[string][]byte) (prepared, error) {
	node, err := img.FindNode()
	if err != nil {
		return prepared{}, err
	}
	if _, ok := files[l.Task.Module]; !ok && l.Task.Module != "" { // no module: an operations-only sandbox (workspaces.BaseTask)
		return prepared{}, fmt.Errorf("%w: the task module %s is missing from deployment %s", images.ErrPreparation, l.Task.Module, l.Run.DeploymentID)
	}
	uid, gid, home, err := img.ResolveUser()
	if err != nil {
		return prepared{}, err
	}
	if p, ok := img.Lookup("/opt/helmr"); ok {
		if ents, err := os.ReadDir(p); err != nil || len(ents) > 0 {
			return prepared{}, fmt.Errorf("%w: the image has files under /opt/helmr, which Helmr mounts over at run time: install them elsewhere (for example /opt/<your-app>)", images.ErrPreparation)
		}
	}
	wsPath := l.Task.Sandbox.Workspace
	if wsPath == "" {
		wsPath = "/workspace"
	}
	mem, _ := deployments.ParseMemory(l.Task.Sandbox.Resources.Memory)
	cpu := l.Task.Sandbox.Resources.CPU
	// A run's machine override (within the declared limits, checked at
	// trigger) sizes its sandbox.
	if n := l.Run.Needs; n.CPU > 0 && (cpu == 0 || n.CPU < cpu) {
		cpu = n.CPU
	}
	if n := l.Run.Needs; n.MemoryBytes > 0 && (mem == 0 || n.MemoryBytes < mem) {
		mem = n.MemoryBytes
	}
	disk, _ := deployments.ParseDisk("disk", l.Task.Sandbox.Resources.Disk) // checked at deploy
	rootSize := w.cfg.RootSize
	if r := l.Task.Sandbox.Resources.RootSize; r != "" {
		rootSize, _ = deployments.ParseRootSize("rootSize", r) // checked at deploy
	}
	env := append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home,
		"HOSTNAME=helmr-sandbox"}, img.Env...)
	return prepared{
		img:  img,
		node: node,
		disk: disk,
		env:  dedupeEnv(env),
		spec: sandbox.Spec{
			RootLayers: img.Layers, Workspace: wsPath, Hostname: "helmr-sandbox", UID: uid, GID: gid,
			CPU: cpu, MemoryBytes: mem, RootSizeBytes: rootSize, Network: w.cfg.Network,
		},
	}, nil
}

func writeFile(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

// dedupeEnv keeps the last value of each key, in first-seen order.
func dedupeEnv(env []string) []string {
	idx := map[string]int{}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// report is how the adapter said the run ended: one of its result or
// its error.
type report struct {
	result  *channel.Result
	failure *channel.Error
}

// readReport decodes msg if it is the adapter's result or error.
func readReport(typ channel.Type, msg []byte) *report {
	switch typ {
	case channel.TypeResult:
		var m channel.Result
		if json.Unmarshal(msg, &m) == nil {
			return &report{result: &m}
		}
	case channel.TypeError:
		var m channel.Error
		if json.Unmarshal(msg, &m) == nil {
			return &report{failure: &m}
		}
	}
	return nil
}
