package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/helmr/helmr/internal/sandbox"
)

// errClosed ends the queues of a client closed by its owner.
var errClosed = errors.New("agent connection closed")

// Client is the worker's side of one agent connection. One goroutine, owned
// by the client, reads frames and hands them to the Exec call they belong
// to; Close ends it and waits for it. Every tier's Sandbox can build its
// Exec on a Client.
type Client struct {
	conn io.ReadWriteCloser
	w    *Writer
	log  *slog.Logger

	hello chan Msg // the first ready or fatal
	// binary: the agent reads binary Stdin frames (its ready said so).
	binary atomic.Bool
	done   chan struct{} // closed when the reader has returned

	mu     sync.Mutex
	nextID uint64
	execs  map[uint64]*Queue[Msg]
	err    error // why the connection ended, once it has
	ending error // what an end of the connection means, if expected (EndAs)
}

// NewClient starts reading conn. The caller must Close the client.
func NewClient(conn io.ReadWriteCloser, log *slog.Logger) *Client {
	c := &Client{
		conn:  conn,
		w:     NewWriter(conn),
		log:   log,
		hello: make(chan Msg, 1),
		done:  make(chan struct{}),
		execs: make(map[uint64]*Queue[Msg]),
		// Ids start at a random point: a guest restored from a checkpoint
		// may still answer a request an earlier client sent (a shell run in
		// flight when the checkpoint was taken), and that answer must not
		// match a request of this client.
		nextID: 1<<32 + rand.Uint64N(1<<48),
	}
	go c.readLoop()
	return c
}

// SendInit sends the process tier's setup with the descriptors its "fd:N"
// references name (fds[N]); WaitReady then waits for the agent's answer.
// The caller closes its copies of fds once SendInit returns.
func (c *Client) SendInit(init *Init, fds []int) error {
	if err := c.w.SendFDs(init, fds); err != nil {
		return fmt.Errorf("send init: %w: %w", sandbox.ErrGuestRuntime, err)
	}
	return nil
}

// WaitReady waits for ready (returning the agent's version) or fatal (an
// error wrapping sandbox.ErrGuestRuntime with the agent's message).
func (c *Client) WaitReady(ctx context.Context) (string, error) {
	select {
	case m := <-c.hello:
		switch m := m.(type) {
		case *Ready:
			return m.Version, nil
		case *Fatal:
			return "", fmt.Errorf("%w: agent setup: %s", sandbox.ErrGuestRuntime, m.Message)
		}
		return "", fmt.Errorf("%w: unexpected %s", sandbox.ErrGuestRuntime, m.MessageType())
	case <-c.done:
		return "", fmt.Errorf("%w: agent exited before ready: %w", sandbox.ErrGuestRuntime, c.Err())
	case <-ctx.Done():
		return "", fmt.Errorf("%w: waiting for agent: %w", sandbox.ErrGuestRuntime, ctx.Err())
	}
}

// Err reports why the connection ended, or nil while it is up.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// EndAs declares that the connection is about to end for reason (such as
// sandbox.ErrCheckpointed): once it does, Exec calls and Err report reason
// instead of the stream's error.
func (c *Client) EndAs(reason error) {
	c.mu.Lock()
	c.ending = reason
	c.mu.Unlock()
}

// Done is closed once the connection has ended and every frame read from
// it has been handed on.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close closes the connection, waits for the reader and fails every Exec
// still running with sandbox.ErrGuestRuntime.
func (c *Client) Close() error {
	err := c.conn.Close()
	<-c.done
	return err
}

func (c *Client) readLoop() {
	defer close(c.done)
	var err error
	for {
		var m Msg
		m, err = ReadMsg(c.conn)
		if errors.Is(err, ErrUnknownType) {
			c.log.Warn("agent sent unknown message", "err", err)
			continue
		}
		if err != nil {
			break
		}
		c.dispatch(m)
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	c.mu.Lock()
	if c.ending != nil {
		err = c.ending
	}
	c.err = err
	execs := c.execs
	c.execs = map[uint64]*Queue[Msg]{}
	c.mu.Unlock()
	for _, q := range execs {
		q.Close(err)
	}
}

func (c *Client) dispatch(m Msg) {
	var id uint64
	switch m := m.(type) {
	case *Ready, *Fatal:
		if r, ok := m.(*Ready); ok && r.Binary {
			c.binary.Store(true)
		}
		select {
		case c.hello <- m:
		default:
			c.log.Warn("agent sent a second hello", "type", m.MessageType())
		}
		return
	case *Started:
		id = m.ID
	case *Output:
		id = m.ID
	case *ChannelMessage:
		id = m.ID
	case *Exit:
		id = m.ID
	case *ShellResult:
		id = m.ID
	default:
		c.log.Warn("agent sent unexpected message", "type", m.MessageType())
		return
	}
	c.mu.Lock()
	q := c.execs[id]
	switch m.(type) {
	case *Exit, *ShellResult:
		delete(c.execs, id)
	}
	c.mu.Unlock()
	if q == nil {
		c.log.Debug("agent message for unknown exec", "type", m.MessageType(), "exec_id", id)
		return
	}
	q.Push(m)
}

// register allocates an exec id and its queue; with attach not zero, it
// registers that id (a process already running in the guest) instead, and
// later ids are higher.
func (c *Client) register(attach uint64) (uint64, *Queue[Msg], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, nil, fmt.Errorf("%w: %w", sandbox.ErrGuestRuntime, c.err)
	}
	id := attach
	if id == 0 {
		c.nextID++
		id = c.nextID
	} else if _, taken := c.execs[id]; taken {
		return 0, nil, fmt.Errorf("attach to exec %d: already attached", id)
	}
	c.nextID = max(c.nextID, id)
	q := NewQueue[Msg]()
	c.execs[id] = q
	return id, q, nil
}

func (c *Client) unregister(id uint64) {
	c.mu.Lock()
	delete(c.execs, id)
	c.mu.Unlock()
}

// WriteFile has the agent place a file (see the WriteFile message) and
// waits for its answer.
func (c *Client) WriteFile(ctx context.Context, req WriteFile) error {
	id, q, err := c.register(0)
	if err != nil {
		return err
	}
	defer c.unregister(id)
	req.ID = id
	if err := c.w.Send(&req); err != nil {
		return fmt.Errorf("%w: send write_file: %w", sandbox.ErrGuestRuntime, err)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.Ready():
		}
		items, closed, qerr := q.Drain()
		for _, m := range items {
			if e, isExit := m.(*Exit); isExit {
				if e.Code != 0 {
					return errors.New(e.Error)
				}
				return nil
			}
		}
		if closed {
			return fmt.Errorf("%w: the agent connection ended: %v", sandbox.ErrGuestRuntime, qerr)
		}
	}
}

// PlaceFile is Client.WriteFile for a sandbox.File.
func (c *Client) PlaceFile(ctx context.Context, f sandbox.File) error {
	req := WriteFile{Path: f.Path, Data: f.Data, Mode: f.Mode, UID: f.UID, GID: f.GID, Dir: f.Dir}
	if f.Reader != nil {
		uid := f.Reader[0]
		req.ReaderUID, req.ReaderGID = &uid, f.Reader[1]
	}
	return c.WriteFile(ctx, req)
}
