package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/workspaces"
)

// The pool of sandboxes started ahead for new workspaces (an E2B sandbox
// is one: its first command would otherwise wait for its sandbox to
// boot). A sandbox of the pool is what opBoxFor starts for a new
// workspace, everything but the workspace's ID: the image's root, a
// fresh workspace seeded from what the image holds at the workspace path
// (a disk of the workspace's quota, if any), its CA and network. A new
// workspace adopts one by renaming that workspace (its directory, or its
// disk's image) to the workspace's, as a run claims a sandbox booted
// ahead (claim); the sandbox mounts it already, so nothing in the
// sandbox changes. A workspace that has files on this worker (a snapshot
// fetched, an earlier run's) boots its own sandbox as before.
//
// The pool follows demand per image and resources: it keeps as many
// sandboxes as new workspaces asked for within any second of the last
// opPoolPeakFor (at least one while one was asked for in the last
// opPoolIdle, none after), within opPoolMax in all and, of the memory
// the sandboxes declare, half the host's. Worker.Warm = 0 turns it off.
const (
	opPoolSpan    = time.Second
	opPoolPeakFor = 30 * time.Second
	opPoolIdle    = 2 * time.Minute
	opPoolMax     = 16
)

// opPool is the pool's state; its zero value is an empty pool.
type opPool struct {
	mu       sync.Mutex
	keys     map[string]*opPoolKey
	count    int   // entries booting or booted, all keys
	mem      int64 // the memory they declare
	closed   bool
	sweeping bool // a sweeper runs
}

// opPoolKey is the pool of one image and resources.
type opPoolKey struct {
	p       prepared // what its sandboxes are started from (the latest ask's)
	quota   int64    // their workspace disk's size (0: the worker's)
	entries []*opPoolEntry
	asks    []time.Time // new workspaces' asks within opPoolPeakFor, oldest first
	last    time.Time   // the last ask
}

// opPoolEntry is a sandbox being started or started. Exactly one party
// closes it: whoever claimed it; else, if the pool closed while it was
// starting, the goroutine starting it; else the sweeper.
type opPoolEntry struct {
	key     *opPoolKey
	ready   chan struct{} // closed when starting ended
	ob      *opBox        // nil if starting failed
	booted  bool
	claimed bool
	mem     int64
}

// target is how many sandboxes k should hold at now.
func (k *opPoolKey) target(now time.Time) int {
	if k.last.IsZero() || now.Sub(k.last) > opPoolIdle {
		return 0
	}
	peak := 1
	for i, t := range k.asks {
		if now.Sub(t) > opPoolPeakFor {
			continue
		}
		n := 1
		for _, u := range k.asks[i+1:] {
			if u.Sub(t) < opPoolSpan {
				n++
			}
		}
		peak = max(peak, n)
	}
	return min(peak, opPoolMax)
}

func (k *opPoolKey) ask(now time.Time) {
	k.last = now
	k.asks = append(k.asks, now)
	i := 0
	for i < len(k.asks) && now.Sub(k.asks[i]) > opPoolPeakFor {
		i++
	}
	k.asks = k.asks[i:]
	if len(k.asks) > 4*opPoolMax {
		k.asks = k.asks[len(k.asks)-4*opPoolMax:]
	}
}

// removeLocked drops e from its key's entries and the pool's counts.
func (p *opPool) removeLocked(e *opPoolEntry) {
	for i, x := range e.key.entries {
		if x == e {
			e.key.entries = append(e.key.entries[:i], e.key.entries[i+1:]...)
			p.count--
			p.mem -= e.mem
			return
		}
	}
}

// take records a new workspace's ask for key and claims a sandbox of the
// pool for it: a started one, else the one starting longest; nil if
// there is none.
func (p *opPool) take(key string, pp prepared, quota int64, now time.Time) *opPoolEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if p.keys == nil {
		p.keys = map[string]*opPoolKey{}
	}
	k := p.keys[key]
	if k == nil {
		k = &opPoolKey{}
		p.keys[key] = k
	}
	k.p, k.quota = pp, quota
	k.ask(now)
	var pick *opPoolEntry
	for _, e := range k.entries {
		if e.booted && e.ob != nil {
			pick = e
			break
		}
		if pick == nil && !e.booted {
			pick = e
		}
	}
	if pick != nil {
		p.removeLocked(pick)
		pick.claimed = true
	}
	return pick
}

// reserve adds entries to key up to its target, within the pool's
// bounds (memCap: the memory the pool's sandboxes may declare in all),
// and returns them for the caller to start. It reports whether a
// sweeper must be started.
func (p *opPool) reserve(key string, memCap int64, now time.Time) ([]*opPoolEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.keys[key]
	if p.closed || k == nil {
		return nil, false
	}
	mem := k.p.spec.MemoryBytes
	var out []*opPoolEntry
	for n := k.target(now) - len(k.entries); n > 0 && p.count < opPoolMax && (mem == 0 || p.mem+mem <= memCap); n-- {
		e := &opPoolEntry{key: k, ready: make(chan struct{}), mem: mem}
		k.entries = append(k.entries, e)
		p.count++
		p.mem += mem
		out = append(out, e)
	}
	sweep := !p.sweeping && p.count > 0
	if sweep {
		p.sweeping = true
	}
	return out, sweep
}

// started records how starting e ended; false means the caller closes ob
// (the pool closed meanwhile and nobody claimed it).
func (p *opPool) started(e *opPoolEntry, ob *opBox) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.ob, e.booted = ob, true
	close(e.ready)
	if e.claimed {
		return true
	}
	if ob == nil || p.closed {
		p.removeLocked(e)
		return false
	}
	return true
}

// sweep drops started sandboxes beyond each key's target and returns
// them to close; done reports the pool is empty (the sweeper stops).
func (p *opPool) sweep(now time.Time) (drop []*opBox, done bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, k := range p.keys {
		extra := len(k.entries) - k.target(now)
		for i := 0; extra > 0 && i < len(k.entries); {
			if e := k.entries[i]; e.booted {
				p.removeLocked(e)
				drop = append(drop, e.ob)
				extra--
				continue
			}
			i++
		}
		if len(k.entries) == 0 && k.target(now) == 0 {
			delete(p.keys, key)
		}
	}
	if p.count == 0 {
		p.sweeping = false
		return drop, true
	}
	return drop, false
}

// close empties the pool for good and returns the started sandboxes to
// close; those still starting are closed by their goroutines.
func (p *opPool) close() []*opBox {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var out []*opBox
	for _, k := range p.keys {
		for _, e := range k.entries {
			if e.booted {
				out = append(out, e.ob)
			}
		}
		k.entries = nil
	}
	p.keys, p.count, p.mem, p.sweeping = nil, 0, 0, false
	return out
}

// adoptPooled gives the new workspace of op a sandbox of the pool, if
// there is one (else nil: opBoxFor starts one), and starts more ahead
// as demand asks. fresh is the opBox opBoxFor prepared, closed unless
// nil, nil is returned. The caller (startOpBox) registers the sandbox.
func (w *Worker) adoptPooled(ctx context.Context, op workspaces.Op, p prepared, fresh *opBox) (*opBox, error) {
	if w.cfg.Warm == 0 || w.existingWorkspace(op.Workspace.ID) != "" {
		return nil, nil
	}
	quota := op.Workspace.QuotaBytes
	key := bootKey(w.cfg.Runtime.Name(), p) + "/" + strconv.FormatInt(quota, 10)
	e := w.opPool.take(key, p, quota, time.Now())
	w.fillOpPool(key)
	if e == nil {
		return nil, nil
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		go func() {
			<-e.ready
			if e.ob != nil {
				e.ob.close(context.Background())
			}
		}()
		fresh.close(context.WithoutCancel(ctx))
		return nil, ctx.Err()
	}
	ob := e.ob
	if ob == nil {
		return nil, nil // starting it failed (logged): start one here
	}
	var err error
	if ob.disk != nil {
		err = w.assignImage(ob.disk, w.WorkspaceDir(op.Workspace.ID)+".img")
	} else {
		target := w.WorkspaceDir(op.Workspace.ID)
		if err = os.Rename(ob.wsHost, target); err == nil {
			ob.wsHost = target
		}
	}
	if err != nil {
		ob.close(context.WithoutCancel(ctx))
		fresh.close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("assign a sandbox started ahead to workspace %s: %w", op.Workspace.ID, err)
	}
	fresh.close(context.WithoutCancel(ctx))
	ob.ws, ob.active = op.Workspace.ID, 1
	w.log.Info("gave a new workspace a sandbox started ahead", "workspace_id", op.Workspace.ID, "sandbox", filepath.Base(ob.dir))
	return ob, nil
}

// fillOpPool starts key's sandboxes up to its target in the background,
// and the sweeper if none runs.
func (w *Worker) fillOpPool(key string) {
	entries, sweep := w.opPool.reserve(key, w.cfg.Capabilities.MemoryBytes/2, time.Now())
	for _, e := range entries {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			ctx, cancel := context.WithTimeout(w.runCtx, bootAheadTimeout)
			defer cancel()
			began := time.Now()
			ob, err := w.startPooled(ctx, e.key.p, e.key.quota)
			if err != nil {
				w.log.Warn("start a sandbox ahead for new workspaces", "err", err)
			} else {
				w.log.Debug("started a sandbox ahead for new workspaces", "sandbox", filepath.Base(ob.dir), "took", time.Since(began).Round(time.Millisecond))
			}
			if !w.opPool.started(e, ob) && ob != nil {
				ob.close(context.WithoutCancel(ctx))
			}
		}()
	}
	if sweep {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.sweepOpPool()
		}()
	}
}

// sweepOpPool shrinks the pool to its targets every second until it is
// empty, and closes it when the worker stops.
func (w *Worker) sweepOpPool() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-w.runCtx.Done():
			for _, ob := range w.opPool.close() {
				ob.close(context.Background())
			}
			return
		case <-t.C:
		}
		drop, done := w.opPool.sweep(time.Now())
		for _, ob := range drop {
			ob.close(context.Background())
		}
		if done {
			return
		}
	}
}

// startPooled starts what opBoxFor starts for a new workspace, but for
// no workspace yet: p's sandbox with a fresh workspace (a disk of quota,
// if the workspace or the worker has one) seeded from the image.
func (w *Worker) startPooled(ctx context.Context, p prepared, quota int64) (*opBox, error) {
	id := newSandboxID()
	ob := &opBox{id: id, rootfs: w.rootfsDigest(p), dir: filepath.Join(w.cfg.DataDir, "booted", id), env: p.env, wsPath: p.spec.Workspace,
		uid: p.spec.UID, gid: p.spec.GID, shells: map[string]*shellUse{}}
	wsDir := filepath.Join(ob.dir, "workspace")
	if err := os.MkdirAll(wsDir, 0o755); err != nil {
		return nil, err
	}
	fail := func(err error) (*opBox, error) {
		ob.close(context.WithoutCancel(ctx))
		return nil, err
	}
	if quota != 0 || w.disks != nil {
		disks, err := w.disksFor(quota)
		if err != nil {
			return fail(err)
		}
		if ob.disk, err = disks.Create(filepath.Join(ob.dir, "workspace.img"), wsDir); err != nil {
			return fail(err)
		}
	}
	if _, err := p.img.CopyTree(p.spec.Workspace, wsDir); err != nil {
		return fail(fmt.Errorf("seed a workspace from the image's %s: %w", p.spec.Workspace, err))
	}
	helmrDir := filepath.Join(ob.dir, "helmr")
	if err := os.MkdirAll(helmrDir, 0o755); err != nil {
		return fail(err)
	}
	var err error
	if ob.trust, err = w.trustFor(id, p.img, p.env, helmrDir, nil); err != nil {
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
	ob.wsHost = spec.WorkspaceHost
	if ob.box, err = w.cfg.Runtime.Start(ctx, spec); err != nil {
		return fail(fmt.Errorf("start a %s sandbox: %w", w.cfg.Runtime.Name(), err))
	}
	if err := ob.trust.install(ctx, ob.box); err != nil {
		return fail(err)
	}
	// A first command as a workspace's runs (a shell, in the workspace),
	// so that what the sandbox does once for its first command is done
	// ahead too.
	st, err := ob.box.Exec(ctx, ob.sandboxExec(workspaces.ExecRequest{Argv: []string{"sh", "-c", "true"}}))
	if err != nil || st.Code != 0 {
		return fail(fmt.Errorf("a first command in a sandbox started ahead: exit %d: %v", st.Code, err))
	}
	return ob, nil
}
