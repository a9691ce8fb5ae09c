package agent

import "sync"

// Queue is an unbounded FIFO of T with one consumer: a producer never blocks
// on a slow consumer (the stream's reader must not stall behind one process).
type Queue[T any] struct {
	mu     sync.Mutex
	items  []T
	closed bool
	err    error
	ready  chan struct{} // has a token while items or closed are pending
}

// NewQueue returns an empty queue.
func NewQueue[T any]() *Queue[T] {
	return &Queue[T]{ready: make(chan struct{}, 1)}
}

// Push appends v; it reports false once the queue is closed.
func (q *Queue[T]) Push(v T) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.items = append(q.items, v)
	q.signalLocked()
	return true
}

// Close ends the queue with err; items already pushed are still drained.
func (q *Queue[T]) Close(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.closed, q.err = true, err
	q.signalLocked()
}

func (q *Queue[T]) signalLocked() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Ready has a value when Drain may return something new.
func (q *Queue[T]) Ready() <-chan struct{} { return q.ready }

// Drain takes every pending item; closed reports that the queue is closed
// and no item remains after these, with the error it was closed with.
func (q *Queue[T]) Drain() (items []T, closed bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	items, q.items = q.items, nil
	return items, q.closed, q.err
}
