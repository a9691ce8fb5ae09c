package process

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Refill back-off after an agent failed to start.
const (
	minRefillBackoff = 100 * time.Millisecond
	maxRefillBackoff = 5 * time.Second
)

// poolCgroupPrefix starts the cgroup name of every warm agent.
const poolCgroupPrefix = "pool-"

// pool keeps up to size warm agents: started in their namespaces and moved
// into their own cgroups (poolCgroupPrefix + random hex), waiting for init.
// A goroutine owned by the pool refills it after each take; close stops the
// goroutine and destroys the idle agents. A warm agent also dies with the
// worker (Pdeathsig).
type pool struct {
	rt   *Runtime
	size int
	log  *slog.Logger

	kick chan struct{} // a take happened; buffered
	stop chan struct{} // closed by close
	done chan struct{} // closed when the refill goroutine has returned

	mu     sync.Mutex
	idle   []*agentProc // oldest first
	closed bool
}

// newPool starts filling a pool of size agents.
func newPool(rt *Runtime, size int) *pool {
	p := &pool{
		rt:   rt,
		size: size,
		log:  rt.log,
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go p.refill()
	return p
}

// take returns the oldest live idle agent, or nil if there is none (or p is
// nil), and asks for a refill. Dead idle agents are destroyed on the way.
func (p *pool) take() *agentProc {
	if p == nil {
		return nil
	}
	var got *agentProc
	var dead []*agentProc
	p.mu.Lock()
	for len(p.idle) > 0 && got == nil {
		a := p.idle[0]
		p.idle = p.idle[1:]
		if a.alive() {
			got = a
		} else {
			dead = append(dead, a)
		}
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
	for _, a := range dead {
		p.log.Warn("warm agent died while idle, discarding it", "cgroup", a.cg.memory)
		p.discard(a)
	}
	return got
}

// discard destroys an agent that will not be used, logging a failure.
func (p *pool) discard(a *agentProc) {
	ctx, cancel := context.WithTimeout(context.Background(), destroyTimeout)
	defer cancel()
	if err := a.destroy(ctx, nil); err != nil {
		p.log.Warn("destroy warm agent", "err", err)
	}
}

// idleCount is the number of idle agents.
func (p *pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// refill is the pool's goroutine: it tops the pool up at start and after
// every take, backing off while agents fail to start.
func (p *pool) refill() {
	defer close(p.done)
	backoff := minRefillBackoff
	for {
		var retry <-chan time.Time
		if err := p.fill(); err != nil {
			p.log.Warn("warm pool: start agent", "err", err, "retry_in", backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, maxRefillBackoff)
		} else {
			backoff = minRefillBackoff
		}
		select {
		case <-p.stop:
			return
		case <-p.kick:
		case <-retry:
		}
	}
}

// fill starts agents until the pool is full or closed.
func (p *pool) fill() error {
	for {
		p.mu.Lock()
		need := !p.closed && len(p.idle) < p.size
		p.mu.Unlock()
		if !need {
			return nil
		}
		name, err := poolCgroupName()
		if err != nil {
			return err
		}
		a, err := p.rt.spawn(name, p.log.With("pool_agent", name))
		if err != nil {
			return err
		}
		p.mu.Lock()
		closed := p.closed
		if !closed {
			p.idle = append(p.idle, a)
		}
		p.mu.Unlock()
		if closed {
			p.discard(a)
			return nil
		}
	}
}

func poolCgroupName() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("pool cgroup name: %w", err)
	}
	return poolCgroupPrefix + hex.EncodeToString(b), nil
}

// close stops refilling, waits for the refill goroutine and destroys the
// idle agents. Later takes find nothing. A nil pool closes at once.
func (p *pool) close(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	close(p.stop)
	var errs []error
	select {
	case <-p.done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("wait for refill: %w", ctx.Err()))
	}
	for _, a := range idle {
		if err := a.destroy(ctx, nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// staleAfter is the age of an empty warm-agent cgroup that sweepPoolCgroups
// removes: far beyond the instant between the cgroup's creation and its
// agent's move into it.
const staleAfter = time.Minute

// sweepPoolCgroups removes the empty warm-agent cgroups under root that a
// worker which died without Close left behind (its agents died with it). A
// cgroup that holds a process cannot be removed, so another worker's warm
// agents are left alone, and so are the cgroups younger than staleAfter.
func sweepPoolCgroups(root string, log *slog.Logger) {
	cg, err := newCgroup(root, "")
	if err != nil {
		return
	}
	removed := 0
	for _, parent := range cg.dirs() {
		stale, _ := filepath.Glob(filepath.Join(parent, poolCgroupPrefix+"*"))
		for _, d := range stale {
			fi, err := os.Stat(d)
			if err != nil || time.Since(fi.ModTime()) < staleAfter {
				continue
			}
			if os.Remove(d) == nil {
				removed++
			}
		}
	}
	if removed > 0 {
		log.Info("removed stale warm agent cgroups", "count", removed)
	}
}
