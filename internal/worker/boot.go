package worker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/disk"
	"github.com/helmr/helmr/internal/sandbox/network"
)

// A booted sandbox is a started sandbox whose guest adapter (node) is
// already running and waiting for its start message: everything of a run
// that does not depend on the run itself. A run either claims one booted
// ahead of time for the same image and resources (warm), or boots one on
// demand (cold); both paths then run the same code. A booted sandbox serves
// exactly one run and is destroyed after it.
type booted struct {
	id       string
	key      string
	box      sandbox.Sandbox
	dir      string        // host dir holding workspace/ and helmr/
	wsDir    string        // host workspace, mounted at the sandbox's workspace path
	disk     *disk.Disk    // the workspace's own filesystem, under a quota (a disk guest's: unmounted)
	layers   []string      // the image layers its root is made of
	helmrDir string        // host dir mounted read-only at /opt/helmr
	maxLeft  time.Duration // restored from a checkpoint: what was left of maxDuration
	// taskPlaced: the run's task files are in place (placeTask).
	taskPlaced bool

	ready  chan struct{} // closed once the adapter runs (sender set) or boot failed
	sender sandbox.Sender
	err    error // boot failure, set before ready closes

	forget func()                  // drops the sandbox from the worker's index
	cancel context.CancelCauseFunc // ends the adapter's Exec
	done   chan struct{}           // closed when the adapter's Exec returned
	exit   sandbox.ExitStatus
	xerr   error

	mu      sync.Mutex
	onOut   func(stream string, data []byte)
	onMsg   func(msg []byte)
	early   []earlyOutput // output before a run claimed the sandbox
	earlyMs [][]byte
	denials []network.Denial // egress the policy refused
	notices []network.Notice // credential events of its network stack

	trust *sandboxTrust        // its CA and credentials (nil: no network)
	creds []network.Credential // the run's egress-bound credentials
	saved map[string]string    // restored: the placeholders the sandbox holds
}

type earlyOutput struct {
	stream string
	data   []byte
}

// bootKey identifies the sandboxes that can serve a run interchangeably:
// same tier, image layers, user, workspace path, resources (root size
// included), environment and node.
func bootKey(tier string, p prepared) string {
	h := sha256.New()
	s := p.spec
	data, _ := json.Marshal([]any{tier, s.RootLayers, s.UID, s.GID, s.Workspace, s.CPU, s.MemoryBytes, s.PidsLimit, s.RootSizeBytes, s.DNS, p.env, p.node, p.disk})
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

func newSandboxID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return "sbx_" + hex.EncodeToString(b)
}

// boot starts a sandbox for p and the adapter in it, and returns once the
// adapter runs (or booting failed, with an error wrapping
// sandbox.ErrGuestRuntime or the runtime's error). The sandbox's life is
// not tied to ctx. existing, if set, is a workspace earlier runs left (an
// image or a directory) that the sandbox gets instead of a fresh one;
// else disks makes the fresh one's disk (nil: a plain directory). files,
// if set, are the deployment's: the sandbox starts with the run's task in
// place (a cold boot); a sandbox booted ahead gets it when a run claims it.
func (w *Worker) boot(ctx context.Context, key string, p prepared, existing string, disks *disk.Factory, files map[string][]byte) (*booted, error) {
	b := &booted{id: newSandboxID(), key: key, ready: make(chan struct{}), done: make(chan struct{})}
	b.dir = filepath.Join(w.cfg.DataDir, "booted", b.id)
	b.wsDir, b.helmrDir = filepath.Join(b.dir, "workspace"), filepath.Join(b.dir, "helmr")
	if err := os.MkdirAll(b.wsDir, 0o755); err != nil {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	switch {
	case strings.HasSuffix(existing, ".img"):
		d, err := w.attachDisk(existing, b.wsDir)
		if err != nil {
			os.RemoveAll(b.dir)
			return nil, fmt.Errorf("attach the workspace: %w", err)
		}
		b.disk = d
	case existing != "":
		b.wsDir = existing
	case disks != nil:
		d, err := disks.Create(filepath.Join(b.dir, "workspace.img"), b.wsDir)
		if err != nil {
			os.RemoveAll(b.dir)
			return nil, err
		}
		b.disk = d
	}
	// What the image holds at the workspace path starts a new workspace
	// (like a fresh volume in Docker): dependencies installed there at
	// build time are the run's to use.
	if existing == "" {
		if _, err := p.img.CopyTree(p.spec.Workspace, b.wsDir); err != nil {
			b.removeDir()
			return nil, fmt.Errorf("%w: seed the workspace from the image's %s: %w", images.ErrPreparation, p.spec.Workspace, err)
		}
	}
	if err := writeFile(filepath.Join(b.helmrDir, "runtime", "adapter.mjs"), w.cfg.Adapter); err != nil {
		b.removeDir()
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(b.helmrDir, "task"), 0o755); err != nil {
		b.removeDir()
		return nil, err
	}
	if files != nil {
		if err := w.placeTask(ctx, b, files); err != nil {
			b.removeDir()
			return nil, err
		}
	}
	trust, err := w.trustFor(b.id, p.img, p.env, b.helmrDir, nil)
	if err != nil {
		b.removeDir()
		return nil, err
	}
	b.trust = trust
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
	box, err := w.cfg.Runtime.Start(ctx, spec)
	if err != nil {
		b.forget()
		b.removeDir()
		return nil, err
	}
	b.box = box
	if err := w.checkNode(ctx, box, p); err != nil {
		b.destroy(context.WithoutCancel(ctx))
		return nil, err
	}
	// The CA goes into the root's system bundles while the adapter
	// starts (nothing reads them before a run claims the sandbox).
	installed := make(chan error, 1)
	go func() { installed <- trust.install(ctx, box) }()
	execCtx, cancel := context.WithCancelCause(context.Background())
	b.cancel = cancel
	env := append(append([]string(nil), p.env...), "HELMR_SANDBOX_ID="+b.id)
	if trust != nil {
		env = dedupeEnv(append(env, trust.env...))
	}
	go func() {
		defer close(b.done)
		b.exit, b.xerr = box.Exec(execCtx, sandbox.ExecRequest{
			Argv: []string{p.node, "/opt/helmr/runtime/adapter.mjs"}, Env: env, Cwd: spec.Workspace,
			Channel: true, OnOutput: b.output, OnMessage: b.message,
			Started: func(s sandbox.Sender) {
				b.sender = s
				close(b.ready)
			},
		})
	}()
	select {
	case <-b.ready:
		if err := <-installed; err != nil {
			b.destroy(context.WithoutCancel(ctx))
			return nil, err
		}
		return b, nil
	case <-b.done:
		err := b.xerr
		if err == nil {
			err = fmt.Errorf("%w: the adapter exited (%+v) before it started", sandbox.ErrGuestRuntime, b.exit)
		}
		b.destroy(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start the adapter: %w", err)
	case <-ctx.Done():
		b.destroy(context.WithoutCancel(ctx))
		return nil, ctx.Err()
	}
}

func (b *booted) output(stream string, data []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.onOut != nil {
		b.onOut(stream, data)
		return
	}
	b.early = append(b.early, earlyOutput{stream, append([]byte(nil), data...)})
}

func (b *booted) message(msg []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.onMsg != nil {
		b.onMsg(msg)
		return
	}
	b.earlyMs = append(b.earlyMs, append([]byte(nil), msg...))
}

// attach routes the adapter's output and messages to a run, delivering
// what arrived before.
func (b *booted) attach(onOut func(string, []byte), onMsg func([]byte)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.early {
		onOut(e.stream, e.data)
	}
	for _, m := range b.earlyMs {
		onMsg(m)
	}
	b.early, b.earlyMs = nil, nil
	b.onOut, b.onMsg = onOut, onMsg
}

// alive reports whether the adapter still runs.
func (b *booted) alive() bool {
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}

// destroy ends the adapter and the sandbox and removes the host dirs (a
// claimed workspace has been moved out by then).
func (b *booted) destroy(ctx context.Context) error {
	if b.cancel != nil {
		b.cancel(errors.New("sandbox destroyed"))
	}
	var err error
	if b.box != nil {
		err = b.box.Destroy(ctx)
	}
	if b.forget != nil {
		b.forget()
	}
	return errors.Join(err, b.removeDir())
}

// removeDir unmounts the workspace disk (a claimed one's image lives on
// under workspaces/) and removes the sandbox's host dir.
func (b *booted) removeDir() error {
	var err error
	if b.disk != nil {
		err = b.disk.Close()
	}
	if err == nil {
		err = os.RemoveAll(b.dir)
	}
	return err
}

// checkNode makes sure, once per image, that the image's node is one the
// guest adapter supports (images.MinNodeVersion or newer).
func (w *Worker) checkNode(ctx context.Context, box sandbox.Sandbox, p prepared) error {
	if _, ok := w.nodeOK.Load(p.img.Digest); ok {
		return nil
	}
	var out strings.Builder
	st, err := box.Exec(ctx, sandbox.ExecRequest{
		Argv: []string{p.node, "-p", "process.versions.node"}, Env: p.env, Cwd: "/",
		OnOutput: func(stream string, data []byte) {
			if stream == "stdout" && out.Len() < 64 {
				out.Write(data)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("check the image's node: %w", err)
	}
	v := strings.TrimSpace(out.String())
	if st.Code != 0 || v == "" {
		return fmt.Errorf("%w: the image's %s does not run (exit code %d)", images.ErrPreparation, p.node, st.Code)
	}
	if !images.NodeVersionOK(v) {
		return fmt.Errorf("%w: the image's node is v%s; TypeScript tasks need Node.js %s or newer", images.ErrPreparation, v, images.MinNodeVersion)
	}
	w.nodeOK.Store(p.img.Digest, v)
	return nil
}
