package guest

import (
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// Reaper reaps every child of this process (as PID 1 that includes every
// orphan of the sandbox) and hands the wait status of the processes started
// through it to their owners. Starting and reaping share one lock, so a
// child cannot be reaped before its pid is registered.
type Reaper struct {
	log     *slog.Logger
	sigs    chan os.Signal
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
}

// NewReaper starts reaping on SIGCHLD. Stop ends it.
func NewReaper(log *slog.Logger) *Reaper {
	r := &Reaper{
		log:     log,
		sigs:    make(chan os.Signal, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		waiting: make(map[int]chan unix.WaitStatus),
	}
	signal.Notify(r.sigs, unix.SIGCHLD)
	go r.loop()
	return r
}

// Start runs start, which must start exactly one child and return its pid,
// and returns a channel that receives the child's wait status.
func (r *Reaper) Start(start func() (int, error)) (<-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiting[pid] = ch
	return ch, nil
}

// Stop ends the reaper and waits for it.
func (r *Reaper) Stop() {
	signal.Stop(r.sigs)
	close(r.stop)
	<-r.done
}

func (r *Reaper) loop() {
	defer close(r.done)
	for {
		select {
		case <-r.sigs:
			r.reap()
		case <-r.stop:
			return
		}
	}
}

// reap collects every exited child; signals coalesce, so it loops until
// nothing is left to collect.
func (r *Reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ch, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			ch <- ws
		}
	}
}
