package agent

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/helmr/helmr/internal/sandbox"
)

// stdinChunk is the most stdin one frame carries.
const stdinChunk = 256 << 10

// Exec runs req in the guest as uid:gid and waits for it to exit. req.Cwd
// must already be resolved (the tier knows its workspace). Callbacks run on
// the calling goroutine, in order. Cancelling ctx sends SIGKILL to the
// process group; Exec then still waits for the exit and returns it with
// ctx's error. A process that could not start returns an error wrapping
// sandbox.ErrExecStart; a lost agent, sandbox.ErrGuestRuntime.
func (c *Client) Exec(ctx context.Context, req sandbox.ExecRequest, uid, gid uint32) (sandbox.ExitStatus, error) {
	if len(req.Argv) == 0 {
		return sandbox.ExitStatus{}, fmt.Errorf("exec: empty argv: %w", sandbox.ErrExecStart)
	}
	if req.Attach != 0 {
		return c.attach(ctx, req)
	}
	id, q, err := c.register(0)
	if err != nil {
		return sandbox.ExitStatus{}, err
	}
	if req.TTY != nil && !req.TTY.Valid() {
		c.unregister(id)
		return sandbox.ExitStatus{}, fmt.Errorf("exec: terminal size %dx%d: %w", req.TTY.Cols, req.TTY.Rows, sandbox.ErrExecStart)
	}
	msg := &Exec{
		ID: id, Argv: req.Argv, Env: req.Env, Cwd: req.Cwd, UID: uid, GID: gid,
		Channel: req.Channel, Stdin: req.Stdin != nil,
	}
	if req.TTY != nil {
		msg.TTY = &WinSize{Rows: req.TTY.Rows, Cols: req.TTY.Cols}
	}
	err = c.w.Send(msg)
	if err != nil {
		c.unregister(id)
		return sandbox.ExitStatus{}, fmt.Errorf("%w: send exec: %w", sandbox.ErrGuestRuntime, err)
	}
	finished := make(chan struct{})
	defer close(finished)
	if req.Stdin != nil {
		// This goroutine ends when req.Stdin's Read returns after the
		// process has finished (like os/exec with a non-file reader).
		go c.copyStdin(id, req.Stdin, finished)
	}
	return c.await(ctx, id, q, req)
}

// attach follows a process a restored guest was running (req.Attach).
func (c *Client) attach(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	id, q, err := c.register(req.Attach)
	if err != nil {
		return sandbox.ExitStatus{}, err
	}
	q.Push(&Started{ID: id})
	return c.await(ctx, id, q, req)
}

func (c *Client) await(ctx context.Context, id uint64, q *Queue[Msg], req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	done := ctx.Done()
	var ctxErr error
	for {
		items, closed, err := q.Drain()
		for _, m := range items {
			switch m := m.(type) {
			case *Started:
				if req.Started != nil {
					req.Started(&sender{c: c, id: id, channel: req.Channel, tty: req.TTY != nil})
				}
			case *Output:
				if req.OnOutput != nil {
					req.OnOutput(m.Stream, m.Data)
				}
			case *ChannelMessage:
				if req.OnMessage != nil {
					req.OnMessage(m.Data)
				}
			case *Exit:
				return exitResult(req.Argv[0], m, ctxErr)
			}
		}
		if closed {
			if errors.Is(err, sandbox.ErrCheckpointed) {
				return sandbox.ExitStatus{}, &sandbox.CheckpointedError{ExecID: id}
			}
			return sandbox.ExitStatus{}, fmt.Errorf("%w: exec %q: %w", sandbox.ErrGuestRuntime, req.Argv[0], err)
		}
		select {
		case <-q.Ready():
		case <-done:
			done, ctxErr = nil, ctx.Err()
			if err := c.w.Send(&Signal{ID: id, Signal: "SIGKILL"}); err != nil {
				c.log.Debug("send kill", "exec_id", id, "err", err)
			}
		}
	}
}

func exitResult(argv0 string, m *Exit, ctxErr error) (sandbox.ExitStatus, error) {
	st := sandbox.ExitStatus{Code: m.Code, Signal: m.Signal}
	if m.Error != "" {
		return st, fmt.Errorf("exec %q: %s: %w", argv0, m.Error, sandbox.ErrExecStart)
	}
	if ctxErr != nil {
		return st, fmt.Errorf("exec %q: %w", argv0, ctxErr)
	}
	return st, nil
}

func (c *Client) copyStdin(id uint64, r io.Reader, finished <-chan struct{}) {
	buf := make([]byte, stdinChunk)
	for {
		n, err := r.Read(buf)
		select {
		case <-finished:
			return
		default:
		}
		if n > 0 {
			if c.sendStdin(&Stdin{ID: id, Data: buf[:n]}) != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.log.Debug("read exec stdin", "exec_id", id, "err", err)
			}
			_ = c.sendStdin(&Stdin{ID: id, EOF: true})
			return
		}
	}
}

// sender writes to one process's channel.
type sender struct {
	c       *Client
	id      uint64
	channel bool
	tty     bool
}

// Resize implements sandbox.Resizer.
func (s *sender) Resize(size sandbox.WinSize) error {
	if !s.tty {
		return fmt.Errorf("resize exec %d: process has no terminal", s.id)
	}
	if !size.Valid() {
		return fmt.Errorf("resize exec %d: size %dx%d out of 1..%d", s.id, size.Cols, size.Rows, sandbox.MaxWinSize)
	}
	if err := s.c.w.Send(&Resize{ID: s.id, WinSize: WinSize{Rows: size.Rows, Cols: size.Cols}}); err != nil {
		return fmt.Errorf("%w: resize exec %d: %w", sandbox.ErrGuestRuntime, s.id, err)
	}
	return nil
}

// Send implements sandbox.Sender. msg must be one line (no newline).
func (s *sender) Send(msg []byte) error {
	if !s.channel {
		return fmt.Errorf("send to exec %d: process has no channel", s.id)
	}
	if len(msg) > MaxMessageLine {
		return fmt.Errorf("send to exec %d: message of %d bytes exceeds %d", s.id, len(msg), MaxMessageLine)
	}
	for _, b := range msg {
		if b == '\n' {
			return fmt.Errorf("send to exec %d: message contains a newline", s.id)
		}
	}
	if err := s.c.w.Send(&ChannelMessage{ID: s.id, Data: msg}); err != nil {
		return fmt.Errorf("%w: send to exec %d: %w", sandbox.ErrGuestRuntime, s.id, err)
	}
	return nil
}

// sendStdin sends a stdin frame: binary to an agent that reads them.
func (c *Client) sendStdin(m *Stdin) error {
	if c.binary.Load() {
		b, _ := encodeBinary(m)
		return c.w.WriteFrame(b)
	}
	return c.w.Send(m)
}
