package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/disk"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/workspaces"
)

// DefaultWorkspaceIdle is how long a workspace's sandbox for direct
// operations stays up after its last operation.
const DefaultWorkspaceIdle = 5 * time.Minute

// opBox is a sandbox with a workspace mounted, serving direct operations
// on that workspace until it is idle for Config.WorkspaceIdle or a run
// needs the workspace.
type opBox struct {
	ws     string
	id     string // the sandbox's
	rootfs string // its root filesystem's capability digest ("" for a registry image)
	box    sandbox.Sandbox
	dir    string
	disk   *disk.Disk
	env    []string
	wsPath string
	wsHost string // the host directory mounted at wsPath ("": a disk guest's image)
	uid    uint32
	gid    uint32
	mu     sync.Mutex
	// shells are the box's open shell sessions: when each was last used,
	// and the secret values its commands have seen (a session keeps what
	// a command exported, so its later output is redacted with them).
	shells  map[string]*shellUse
	active  int
	lastUse time.Time
	closed  bool
	idle    *time.Timer   // stops the sandbox once idle; reset by each release
	trust   *sandboxTrust // its CA and credentials (nil: no network)
	// stage holds its checkpoint, and pausedCA its CA, between a pause's
	// checkpoint and upload (pause.go).
	stage    string
	pausedCA []byte
	// watches counts the agent's built-in watchers running in the box
	// (opfiles.go): while one runs, files are written through the sandbox.
	watches int
}

// serveOps long-polls the control plane for direct operations on the
// workspaces of this worker's host and runs each.
func (w *Worker) serveOps(ctx context.Context) {
	for ctx.Err() == nil {
		op, err := w.cfg.Control.NextOp(ctx, w.cfg.ID, w.cfg.Capabilities.Host)
		if err != nil {
			if !errors.Is(err, workspaces.ErrNoOp) && ctx.Err() == nil {
				w.log.Warn("ask for workspace operations", "err", err)
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
			res := w.doOp(ctx, op)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := w.cfg.Control.FinishOp(rctx, op.ID, res); err != nil {
				w.log.Warn("report a workspace operation", "op_id", op.ID, "workspace_id", op.Workspace.ID, "err", err)
			}
		}()
	}
	w.closeOpBoxes()
}

// doOp runs one operation in the workspace's sandbox, starting it if
// needed.
func (w *Worker) doOp(ctx context.Context, op workspaces.Op) workspaces.OpResult {
	if _, busy := w.wsRuns.Load(op.Workspace.ID); busy {
		return workspaces.OpResult{Error: "workspace " + op.Workspace.ID + " is in use by a run"}
	}
	switch {
	case op.Pause != nil:
		return w.doPause(ctx, op)
	case op.Resume != nil:
		return w.doResume(ctx, op)
	case op.Shell != nil:
		return w.doShell(ctx, op)
	case op.Terminal != nil:
		return w.doTerminal(ctx, op)
	case op.Exec == nil:
		return workspaces.OpResult{Error: "unknown workspace operation"}
	case op.Data != "":
		return w.doDataOp(ctx, op)
	}
	ob, err := w.opBoxFor(ctx, op)
	if err != nil {
		return workspaces.OpResult{Error: err.Error()}
	}
	defer w.releaseOpBox(ob)
	// Credentials go into the command here, for this exec only, and come
	// out of everything it reports.
	var lines *opLines
	var chunk func(string, []byte)
	if op.Stream {
		lines = &opLines{secrets: op.Secrets, send: func(stream, data string) {
			if err := w.cfg.Control.OpOutput(ctx, op.ID, workspaces.OpOutput{Stream: stream, Data: workspaces.Redact(data, op.Secrets)}); err != nil {
				w.log.Warn("stream a workspace operation's output", "op_id", op.ID, "err", err)
			}
		}}
		chunk = lines.write
	}
	held, creds, err := heldSecrets(op, nil)
	if err != nil {
		return workspaces.OpResult{Error: err.Error()}
	}
	defer ob.trust.add(creds)()
	res, err := ob.exec(ctx, op.Exec.WithSecrets(held), op.Attach, op.Secrets, chunk)
	lines.flush()
	var cut *sandbox.CheckpointedError
	if errors.As(err, &cut) {
		// The workspace was paused under the command: it goes on in the
		// checkpoint, and an Attach operation follows it after resume.
		return workspaces.OpResult{Checkpointed: cut.ExecID, Host: w.cfg.Capabilities.Host}
	}
	if err != nil {
		return workspaces.OpResult{Error: workspaces.Redact(err.Error(), op.Secrets)}
	}
	res = res.Redact(op.Secrets).Encode(op.Exec.OutputEncoding)
	return workspaces.OpResult{Exec: &res, Host: w.cfg.Capabilities.Host}
}

// opBoxFor returns the running sandbox of the operation's workspace, or
// starts one: the task's image, the workspace's files (a new workspace
// starts from what the image holds at the workspace path), no task.
func (w *Worker) opBoxFor(ctx context.Context, op workspaces.Op) (*opBox, error) {
	return w.openOpBox(ctx, op, nil)
}

// openOpBox is opBoxFor; with from, the sandbox is restored from a
// paused workspace's checkpoint (see pause.go) instead of started, and
// one already running is an error.
// Sandboxes of different workspaces start at the same time; an operation
// on a workspace whose sandbox is starting waits for it (opStarting).
func (w *Worker) openOpBox(ctx context.Context, op workspaces.Op, from *pausedBox) (*opBox, error) {
	id := op.Workspace.ID
	for {
		w.opMu.Lock()
		if ob, ok := w.opBoxes[id]; ok {
			w.opMu.Unlock()
			if from != nil {
				return nil, fmt.Errorf("workspace %s has a running sandbox on this worker already", id)
			}
			ob.mu.Lock()
			ob.active++
			ob.mu.Unlock()
			return ob, nil
		}
		starting, ok := w.opStarting[id]
		if !ok {
			break // w.opMu held
		}
		w.opMu.Unlock()
		select {
		case <-starting:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if from == nil && w.fenced(op) {
		w.opMu.Unlock()
		return nil, fmt.Errorf("workspace %s is being paused", id)
	}
	started := make(chan struct{})
	w.opStarting[id] = started
	w.opMu.Unlock()
	defer func() {
		w.opMu.Lock()
		delete(w.opStarting, id)
		w.opMu.Unlock()
		close(started)
	}()
	ob, err := w.startOpBox(ctx, op, from)
	if err != nil {
		return nil, err
	}
	w.opMu.Lock()
	defer w.opMu.Unlock()
	if from == nil && w.fenced(op) {
		// A pause came while it started: the pause found no sandbox and
		// saved the files as they were; this one must not run beside it.
		w.bg.Go(func() { ob.close(context.Background()) })
		return nil, fmt.Errorf("workspace %s is being paused", id)
	}
	w.opBoxes[id] = ob
	return ob, nil
}

// startOpBox starts (or, with from, restores) the sandbox of op's
// workspace for openOpBox, which registers it.
func (w *Worker) startOpBox(ctx context.Context, op workspaces.Op, from *pausedBox) (*opBox, error) {
	if op.Task.Sandbox == nil {
		return nil, fmt.Errorf("task %s declares no sandbox", op.Task.ID)
	}
	files := map[string][]byte{} // the built-in base sandbox (workspaces.BaseTask) has no deployment
	if op.DeploymentID != "" {
		var err error
		if files, err = w.cfg.Control.Files(ctx, op.DeploymentID); err != nil {
			return nil, fmt.Errorf("fetch deployment %s: %w", op.DeploymentID, err)
		}
	}
	img, err := w.cfg.Images.Prepare(ctx, op.Task.Sandbox.Image, files, images.PrepareOptions{Scope: op.Workspace.Project})
	if err != nil {
		return nil, err
	}
	p, err := w.prepare(Lease{Run: runs.Run{DeploymentID: op.DeploymentID}, Task: op.Task}, img, files)
	if err != nil {
		return nil, err
	}
	id := newSandboxID()
	if from != nil {
		id = from.manifest.SandboxID // the runtime restores it under its own id
	}
	ob := &opBox{ws: op.Workspace.ID, id: id, rootfs: w.rootfsDigest(p), dir: filepath.Join(w.cfg.DataDir, "booted", id), env: p.env,
		wsPath: p.spec.Workspace, uid: p.spec.UID, gid: p.spec.GID, active: 1, shells: map[string]*shellUse{}}
	wsDir := filepath.Join(ob.dir, "workspace")
	if err := os.MkdirAll(wsDir, 0o755); err != nil {
		return nil, err
	}
	fail := func(err error) (*opBox, error) {
		ob.close(context.WithoutCancel(ctx))
		return nil, err
	}
	if _, busy := w.wsRuns.Load(op.Workspace.ID); busy {
		return fail(fmt.Errorf("workspace %s is in use by a run", op.Workspace.ID))
	}
	unlock := w.lockWorkspace(op.Workspace.ID) // a snapshot may be under way
	defer unlock()
	if _, err := w.fetchWorkspace(ctx, op.Workspace); err != nil {
		return fail(err)
	}
	w.markUsed(op.Workspace.ID)
	if pooled, err := w.adoptPooled(ctx, op, p, ob); pooled != nil || err != nil {
		return pooled, err // a sandbox started ahead (oppool.go)
	}
	switch existing := w.existingWorkspace(op.Workspace.ID); {
	case strings.HasSuffix(existing, ".img"):
		if ob.disk, err = w.attachDisk(existing, wsDir); err != nil {
			return fail(fmt.Errorf("attach the workspace: %w", err))
		}
	case existing != "":
		wsDir = existing
	case from != nil:
		return fail(fmt.Errorf("the files of paused workspace %s are not on this worker after restoring its snapshot", op.Workspace.ID))
	case op.Workspace.QuotaBytes != 0 || w.disks != nil:
		disks, err := w.disksFor(op.Workspace.QuotaBytes)
		if err != nil {
			return fail(fmt.Errorf("workspace %s: %w", op.Workspace.ID, err))
		}
		if ob.disk, err = disks.Create(filepath.Join(ob.dir, "workspace.img"), wsDir); err != nil {
			return fail(err)
		}
		fallthrough
	default:
		if _, err := img.CopyTree(p.spec.Workspace, wsDir); err != nil {
			return fail(fmt.Errorf("seed the workspace from the image's %s: %w", p.spec.Workspace, err))
		}
		// The new workspace is kept under its ID from now on.
		if ob.disk != nil {
			target := w.WorkspaceDir(op.Workspace.ID) + ".img"
			if err := os.Rename(ob.disk.Image, target); err != nil {
				return fail(err)
			}
			ob.disk.Image = target
		} else {
			target := w.WorkspaceDir(op.Workspace.ID)
			if err := os.Rename(wsDir, target); err != nil {
				return fail(err)
			}
			wsDir = target
		}
	}
	helmrDir := filepath.Join(ob.dir, "helmr")
	if err := os.MkdirAll(helmrDir, 0o755); err != nil {
		return fail(err)
	}
	var ca *network.CA
	if from != nil {
		ca = from.ca
	}
	if ob.trust, err = w.trustFor(id, img, p.env, helmrDir, ca); err != nil {
		return fail(err)
	}
	if ob.trust != nil {
		ob.env = dedupeEnv(append(append([]string(nil), ob.env...), ob.trust.env...))
	}
	spec := p.spec
	spec.ID, spec.HelmrHost = id, helmrDir
	if err := w.handOver(&spec, ob.disk, wsDir); err != nil {
		return fail(err)
	}
	ob.wsHost = spec.WorkspaceHost // none for a disk guest: its files are the guest's
	if from != nil {
		// The restored sandbox trusts the CA it was checkpointed with,
		// whose files its root holds already.
		if ob.box, err = w.cfg.Runtime.(sandbox.Checkpointer).Restore(ctx, spec, from.image); err != nil {
			return fail(fmt.Errorf("restore the %s sandbox of workspace %s: %w", w.cfg.Runtime.Name(), op.Workspace.ID, err))
		}
	} else {
		if ob.box, err = w.cfg.Runtime.Start(ctx, spec); err != nil {
			return fail(fmt.Errorf("start a %s sandbox for workspace %s: %w", w.cfg.Runtime.Name(), op.Workspace.ID, err))
		}
		if err := ob.trust.install(ctx, ob.box); err != nil {
			return fail(err)
		}
	}
	w.log.Info("started a sandbox for workspace operations", "workspace_id", op.Workspace.ID, "sandbox", id)
	return ob, nil
}

// releaseOpBox ends an operation's hold on its sandbox; the sandbox stops
// once idle for the configured time.
func (w *Worker) releaseOpBox(ob *opBox) {
	idle := w.cfg.WorkspaceIdle
	ob.mu.Lock()
	defer ob.mu.Unlock()
	ob.active--
	ob.lastUse = time.Now()
	if ob.idle != nil {
		ob.idle.Reset(idle)
		return
	}
	ob.idle = time.AfterFunc(idle, func() { w.bg.Go(func() { w.retireIfIdle(ob, idle) }) })
}

// retireIfIdle stops ob's sandbox if no operation used it for idle and no
// one else closed it meanwhile (its idle timer fired).
func (w *Worker) retireIfIdle(ob *opBox, idle time.Duration) {
	if next := w.expireShells(ob); next > 0 {
		// A session in use keeps the sandbox: look again when it could
		// expire.
		ob.mu.Lock()
		if !ob.closed {
			ob.idle.Reset(max(next, idle-time.Since(ob.lastUse)))
		}
		ob.mu.Unlock()
		return
	}
	w.opMu.Lock()
	ob.mu.Lock()
	stale := ob.active == 0 && time.Since(ob.lastUse) >= idle && !ob.closed
	ob.mu.Unlock()
	if stale && w.opBoxes[ob.ws] == ob {
		delete(w.opBoxes, ob.ws)
	} else {
		stale = false
	}
	w.opMu.Unlock()
	if !stale {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.retireOpBox(ctx, ob)
	w.log.Info("stopped an idle workspace sandbox", "workspace_id", ob.ws)
}

// closeOpBox stops the operations sandbox of workspace id, if any, so a
// run can take the workspace.
func (w *Worker) closeOpBox(ctx context.Context, id string) {
	w.opMu.Lock()
	ob := w.opBoxes[id]
	delete(w.opBoxes, id)
	w.opMu.Unlock()
	if ob != nil {
		w.retireOpBox(ctx, ob)
	}
}

func (w *Worker) closeOpBoxes() {
	w.opMu.Lock()
	boxes := w.opBoxes
	w.opBoxes = map[string]*opBox{}
	w.opMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, ob := range boxes {
		w.retireOpBox(ctx, ob)
	}
}

// retireOpBox stops an operations sandbox and saves its workspace (a
// snapshot, unless unchanged).
func (w *Worker) retireOpBox(ctx context.Context, ob *opBox) {
	ob.close(ctx)
	unlock := w.lockWorkspace(ob.ws)
	defer unlock()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
	defer cancel()
	if _, _, err := w.saveWorkspace(sctx, ob.ws); err != nil {
		w.log.Warn("save a workspace snapshot", "workspace_id", ob.ws, "err", err)
	}
}

// close destroys the sandbox and unmounts the workspace (its image stays).
func (ob *opBox) close(ctx context.Context) {
	ob.mu.Lock()
	ob.closed = true
	if ob.idle != nil {
		ob.idle.Stop()
	}
	ob.mu.Unlock()
	if ob.box != nil {
		_ = ob.box.Destroy(ctx)
	}
	if ob.disk != nil {
		_ = ob.disk.Close()
	}
	ob.trust.release()
	_ = os.RemoveAll(ob.dir)
}

// heldSecrets is what the sandbox holds for op's secrets by name: the
// value of each placed in the sandbox, a placeholder for each bound for
// egress, whose credentials (new ones) it returns. have are credentials
// to reuse by name (a shell session keeps its placeholders).
func heldSecrets(op workspaces.Op, have map[string]network.Credential) (map[string]string, []network.Credential, error) {
	if len(op.Egress) == 0 {
		return op.Secrets, nil, nil
	}
	held := make(map[string]string, len(op.Secrets))
	var fresh []network.Credential
	for name, v := range op.Secrets {
		rule := op.Egress[name]
		if rule == nil {
			held[name] = v
			continue
		}
		if c, ok := have[name]; ok && c.Value == strings.TrimRight(v, "\r\n") {
			held[name] = c.Placeholder
			continue
		}
		c, _, err := egressCredential(name, []byte(v), rule, "")
		if err != nil {
			return nil, nil, err
		}
		held[name] = c.Placeholder
		fresh = append(fresh, c)
	}
	return held, fresh, nil
}

// exec runs one command under its timeout, keeping at most
// MaxOutputBytes of each stream, never cutting through a value of
// secrets.
func (ob *opBox) exec(ctx context.Context, req workspaces.ExecRequest, attach uint64, secrets map[string]string, chunk func(stream string, data []byte)) (workspaces.ExecResult, error) {
	ctx, cancel := context.WithTimeout(ctx, req.Timeout())
	defer cancel()
	hold := workspaces.Lookahead(secrets)
	out := [2]capped{{hold: hold}, {hold: hold}}
	start := time.Now()
	sreq := ob.sandboxExec(req)
	sreq.Attach = attach
	sreq.OnOutput = func(stream string, data []byte) {
		if stream == "stderr" {
			out[1].write(data)
		} else {
			out[0].write(data)
		}
		if chunk != nil {
			chunk(stream, data)
		}
	}
	st, err := ob.box.Exec(ctx, sreq)
	res := workspaces.ExecResult{
		ExitCode: st.Code, Signal: st.Signal, DurationMs: float64(time.Since(start).Microseconds()) / 1000,
		Stdout: out[0].String(secrets), Stderr: out[1].String(secrets), StdoutTruncated: out[0].truncated(), StderrTruncated: out[1].truncated(),
	}
	if ctx.Err() != nil {
		res.TimedOut = true
		if res.Signal == "" {
			res.Signal = "killed"
		}
		return res, nil
	}
	if errors.Is(err, sandbox.ErrExecStart) {
		// The command could not start (no such executable, a bad working
		// directory): the caller's mistake, answered as a shell answers
		// it, with 127 or 126 and the reason on stderr.
		res.Stderr += strings.TrimSuffix(err.Error(), ": "+sandbox.ErrExecStart.Error()) + "\n"
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("exec in workspace %s: %w", ob.ws, err)
	}
	return res, nil
}

// capped keeps the first MaxOutputBytes of a stream (and hold bytes
// more, to see whether a secret's value straddles the limit) and counts
// the rest.
type capped struct {
	buf  []byte
	cut  int
	hold int
}

func (c *capped) write(p []byte) {
	room := workspaces.MaxOutputBytes + c.hold - len(c.buf)
	if room >= len(p) {
		c.buf = append(c.buf, p...)
		return
	}
	if room > 0 {
		c.buf = append(c.buf, p[:room]...)
	}
	c.cut += len(p) - max(room, 0)
}

func (c *capped) truncated() bool { return c.cut > 0 || len(c.buf) > workspaces.MaxOutputBytes }

// String is what was kept, cut at the limit, or before a value of
// secrets that straddles it, with a marker saying how much more came.
func (c *capped) String(secrets map[string]string) string {
	if !c.truncated() {
		return string(c.buf)
	}
	n := workspaces.SafeCut(string(c.buf), workspaces.MaxOutputBytes, secrets)
	return fmt.Sprintf("%s\n[helmr: output truncated: %d more bytes]\n", c.buf[:n], c.cut+len(c.buf)-n)
}

// opLines turns a streamed operation's output into whole lines per stream
// (a line longer than 16 KiB goes in pieces, cut where no secret's value
// straddles), so each piece can be redacted before it leaves. At most
// MaxOutputBytes of each stream are streamed.
type opLines struct {
	send    func(stream, data string)
	secrets map[string]string // never cut through one of these values
	buf     [2][]byte
	sent    [2]int
}

func (l *opLines) write(stream string, data []byte) {
	i := 0
	if stream == "stderr" {
		i = 1
	}
	l.buf[i] = append(l.buf[i], data...)
	hold := workspaces.Lookahead(l.secrets)
	for {
		n := bytes.LastIndexByte(l.buf[i], '\n') + 1
		if n == 0 && len(l.buf[i]) >= 16<<10+hold {
			// A piece of a long line, ending where no value straddles.
			n = workspaces.SafeCut(string(l.buf[i]), len(l.buf[i])-hold, l.secrets)
		}
		if n == 0 {
			return
		}
		l.emit(i, stream, l.buf[i][:n])
		l.buf[i] = append(l.buf[i][:0], l.buf[i][n:]...)
	}
}

func (l *opLines) emit(i int, stream string, data []byte) {
	room := workspaces.MaxOutputBytes - l.sent[i]
	if room <= 0 {
		return
	}
	l.sent[i] += len(data)
	if len(data) > room {
		data = data[:workspaces.SafeCut(string(data), room, l.secrets)]
		l.sent[i] = workspaces.MaxOutputBytes // nothing more of this stream
	}
	l.send(stream, string(data))
}

// flush sends what is left of each stream (its last, unterminated line).
func (l *opLines) flush() {
	if l == nil {
		return
	}
	for i, stream := range []string{"stdout", "stderr"} {
		if len(l.buf[i]) > 0 {
			l.emit(i, stream, l.buf[i])
			l.buf[i] = nil
		}
	}
}
