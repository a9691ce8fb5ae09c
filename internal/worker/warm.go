package worker

import (
	"context"
	"sync"
	"time"
)

// warmPool keeps sandboxes booted ahead of time, one per key, for at most
// max keys (the most recently used). A run claims the one for its key; the
// worker then boots the next in the background.
type warmPool struct {
	mu      sync.Mutex
	max     int
	entries map[string]*warmEntry
	order   []string // keys, least recently used first
	closed  bool
}

// warmEntry is one sandbox being booted or booted. Exactly one party
// destroys it: the run that claimed it; else, if it was evicted or the pool
// closed while it was booting, the goroutine booting it; else whoever
// evicted it or closed the pool.
type warmEntry struct {
	ready   chan struct{} // closed when booting ended
	b       *booted       // nil if booting failed
	booted  bool          // booting ended (guarded by the pool's mutex)
	claimed bool
	evicted bool
}

func newWarmPool(max int) *warmPool {
	return &warmPool{max: max, entries: map[string]*warmEntry{}}
}

// claim takes the entry for key, waiting for it if it is still booting;
// nil when there is none or it failed or died.
func (p *warmPool) claim(ctx context.Context, key string) *booted {
	p.mu.Lock()
	e := p.entries[key]
	if e != nil {
		delete(p.entries, key)
		e.claimed = true
	}
	p.mu.Unlock()
	if e == nil {
		return nil
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil
	}
	if e.b == nil || !e.b.alive() {
		if e.b != nil {
			_ = e.b.destroy(context.Background())
		}
		return nil
	}
	return e.b
}

// reserve registers a booting entry for key unless one exists or the pool
// is off or closed; it returns the entry and the entries evicted to make
// room.
func (p *warmPool) reserve(key string) (*warmEntry, []*warmEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.max <= 0 || p.closed || p.entries[key] != nil {
		return nil, nil
	}
	e := &warmEntry{ready: make(chan struct{})}
	p.entries[key] = e
	p.touchLocked(key)
	var evicted []*warmEntry
	for len(p.order) > p.max {
		old := p.order[0]
		p.order = p.order[1:]
		if oe := p.entries[old]; oe != nil {
			delete(p.entries, old)
			if p.evictLocked(oe) {
				evicted = append(evicted, oe)
			}
		}
	}
	return e, evicted
}

// evictLocked marks e evicted and reports whether the caller must destroy
// it now (it finished booting); otherwise its booting goroutine will.
func (p *warmPool) evictLocked(e *warmEntry) bool {
	e.evicted = true
	return e.booted && e.b != nil
}

func (p *warmPool) touchLocked(key string) {
	for i, k := range p.order {
		if k == key {
			p.order = append(p.order[:i], p.order[i+1:]...)
			break
		}
	}
	p.order = append(p.order, key)
}

// booted records the outcome of booting e; it returns false when e was
// evicted or the pool closed meanwhile and nobody claimed it (the caller
// destroys b then).
func (p *warmPool) booted(e *warmEntry, b *booted) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.b, e.booted = b, true
	close(e.ready)
	return e.claimed || !e.evicted && !p.closed
}

// close stops the pool and returns the booted entries to destroy; entries
// still booting are destroyed by their booting goroutines.
func (p *warmPool) close() []*warmEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var out []*warmEntry
	for k, e := range p.entries {
		delete(p.entries, k)
		if p.evictLocked(e) {
			out = append(out, e)
		}
	}
	return out
}

// bootAheadTimeout bounds booting a sandbox ahead (for a run, or for new
// workspaces): nobody waits for it, and an emulated VM (the microvm tier
// under TCG) boots in seconds, many more on a loaded host.
const bootAheadTimeout = 3 * time.Minute

// refill boots a sandbox for key in the background, owned by the worker.
func (w *Worker) refill(ctx context.Context, key string, p prepared) {
	e, evicted := w.warm.reserve(key)
	for _, oe := range evicted {
		_ = oe.b.destroy(context.WithoutCancel(ctx))
	}
	if e == nil {
		return
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		bctx, cancel := context.WithTimeout(ctx, bootAheadTimeout)
		defer cancel()
		began := time.Now()
		disks, err := w.disksFor(p.disk)
		var b *booted
		if err == nil {
			b, err = w.boot(bctx, key, p, "", disks, nil)
		}
		if err != nil {
			w.log.Warn("boot warm sandbox failed", "err", err)
		} else {
			w.log.Info("booted a sandbox ahead", "sandbox", b.id, "took", time.Since(began).Round(time.Millisecond))
		}
		if !w.warm.booted(e, b) && b != nil {
			_ = b.destroy(context.WithoutCancel(ctx))
		}
	}()
}

// closeWarm stops booting sandboxes ahead and destroys the idle ones.
func (w *Worker) closeWarm(ctx context.Context) {
	for _, e := range w.warm.close() {
		_ = e.b.destroy(ctx)
	}
}
