package worker

import "sync"

// background runs a worker's work that no request waits for (layer cache
// collection, sweeps of deleted workspaces, retiring idle operations
// sandboxes): Run stops it and waits for it before it closes the runtime,
// and none of it starts once stopping has begun.
type background struct {
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
}

// Go runs f on a goroutine of its own, unless stopping has begun; it
// reports whether f runs. (Add happens under mu before stopped is set, so
// it never races Stop's Wait.)
func (b *background) Go(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// Stop refuses new work and waits for the work that runs.
func (b *background) Stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
	b.wg.Wait()
}
