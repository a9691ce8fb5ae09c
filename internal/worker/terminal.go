package worker

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/workspaces"
)

// terminalShell starts the image's interactive shell: bash if it has
// one, else sh.
var terminalShell = []string{"/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -i; fi; exec sh -i"}

// Bounds of a terminal's output on its way to the control plane.
const (
	// termPiece is the most one output piece carries.
	termPiece = 64 << 10
	// termPending is how much output may wait for the control plane;
	// beyond it output is dropped (with a marker), not queued without
	// bound.
	termPending = 4 << 20
)

// doTerminal runs a terminal operation (workspaces.Op.Terminal): an
// interactive shell on a pseudo-terminal in the workspace's sandbox, as
// its user, in its directory, with TERM=xterm-256color. The operation's
// input stream carries the keys and size changes
// (workspaces.TerminalInput); what the terminal prints goes back as the
// operation's streamed output, in base64 pieces. It ends when the shell
// exits, when the input ends (the terminal was closed) or when the
// sandbox ends. Nothing is redacted: a terminal carries no credentials.
func (w *Worker) doTerminal(ctx context.Context, op workspaces.Op) workspaces.OpResult {
	streams, ok := w.cfg.Control.(OpStreams)
	if !ok {
		return workspaces.OpResult{Error: "this worker's control plane moves no terminal data"}
	}
	if err := op.Terminal.Validate(); err != nil {
		return workspaces.OpResult{Error: err.Error()}
	}
	ob, err := w.opBoxFor(ctx, op)
	if err != nil {
		return workspaces.OpResult{Error: err.Error()}
	}
	defer w.releaseOpBox(ob)
	res, err := w.runTerminal(ctx, ob, op, streams)
	if err != nil {
		return workspaces.OpResult{Error: err.Error()}
	}
	return workspaces.OpResult{Exec: &res, Host: w.cfg.Capabilities.Host}
}

func (w *Worker) runTerminal(ctx context.Context, ob *opBox, op workspaces.Op, streams OpStreams) (workspaces.ExecResult, error) {
	ctx, cancel := context.WithTimeout(ctx, workspaces.MaxExecTimeout*time.Second)
	defer cancel()
	in, err := streams.OpInput(ctx, op.ID)
	if err != nil {
		return workspaces.ExecResult{}, fmt.Errorf("open the terminal's input: %w", err)
	}
	execCtx, kill := context.WithCancel(ctx)
	defer kill()
	keys, typer := io.Pipe()
	defer typer.Close() // the exec's stdin copier ends
	tty := &ttyControl{}
	// The input reader ends when the control plane ends the stream: when
	// the terminal is closed (then the shell is killed), or, at the
	// latest, once the operation's result is in. The worker waits for it.
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer in.Close()
		err := workspaces.ReadTerminalInput(in, func(f workspaces.TerminalInput) error {
			if f.Size != nil {
				tty.resize(sandbox.WinSize{Rows: uint16(f.Size.Rows), Cols: uint16(f.Size.Cols)})
			}
			if len(f.Data) > 0 {
				if _, err := typer.Write(f.Data); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, io.ErrClosedPipe) && execCtx.Err() == nil {
			w.log.Warn("read a terminal's input", "op_id", op.ID, "err", err)
		}
		kill()
	}()
	out := &termOutput{ready: make(chan struct{})}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		out.pump(func(data []byte) error {
			err := w.cfg.Control.OpOutput(ctx, op.ID, workspaces.OpOutput{Stream: "stdout", Data: base64.StdEncoding.EncodeToString(data)})
			if errors.Is(err, errdefs.ErrNotFound) {
				kill() // nobody waits for this terminal any more
			}
			return err
		})
	}()
	env := append(append([]string(nil), ob.env...), "TERM=xterm-256color")
	start := time.Now()
	st, err := ob.box.Exec(execCtx, sandbox.ExecRequest{
		Argv: terminalShell, Env: dedupeEnv(env), Cwd: ob.wsPath, Stdin: keys,
		TTY:      &sandbox.WinSize{Rows: uint16(op.Terminal.Rows), Cols: uint16(op.Terminal.Cols)},
		OnOutput: func(_ string, data []byte) { out.write(data) },
		Started:  tty.started,
	})
	out.close()
	<-sent
	res := workspaces.ExecResult{ExitCode: st.Code, Signal: st.Signal, DurationMs: float64(time.Since(start).Microseconds()) / 1000}
	switch {
	case errors.Is(err, sandbox.ErrExecStart):
		return res, fmt.Errorf("start the terminal's shell: %w", err)
	case err != nil && execCtx.Err() == nil:
		return res, fmt.Errorf("terminal in workspace %s: %w", ob.ws, err)
	}
	return res, nil
}

// ttyControl resizes the terminal once its process runs; a size that
// comes before is applied when it starts.
type ttyControl struct {
	mu      sync.Mutex
	rs      sandbox.Resizer
	pending *sandbox.WinSize
}

func (t *ttyControl) started(s sandbox.Sender) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rs, _ = s.(sandbox.Resizer)
	if t.rs != nil && t.pending != nil {
		_ = t.rs.Resize(*t.pending)
		t.pending = nil
	}
}

func (t *ttyControl) resize(size sandbox.WinSize) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rs == nil {
		t.pending = &size
		return
	}
	_ = t.rs.Resize(size) // a size the control plane let through is valid; a gone process ignores it
}

// termOutput holds a terminal's output until pump sends it: whatever
// came since the last piece went, so a slow control plane gets fewer,
// larger pieces rather than a queue without bound.
type termOutput struct {
	mu      sync.Mutex
	buf     []byte
	dropped int
	closed  bool
	ready   chan struct{} // closed and replaced when output comes or it closes
}

func (o *termOutput) write(b []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.buf)+len(b) > termPending {
		o.dropped += len(b)
	} else {
		o.buf = append(o.buf, b...)
	}
	o.signalLocked()
}

func (o *termOutput) signalLocked() {
	close(o.ready)
	o.ready = make(chan struct{})
}

func (o *termOutput) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	o.signalLocked()
}

// pump sends the output in pieces of at most termPiece until it is
// closed and sent, or send fails with errdefs.ErrNotFound (other
// failures lose that piece: a terminal goes on).
func (o *termOutput) pump(send func([]byte) error) {
	for {
		o.mu.Lock()
		var piece []byte
		if o.dropped > 0 {
			piece = fmt.Appendf(nil, "\r\n[helmr: %d bytes of output dropped: the control plane fell behind]\r\n", o.dropped)
			o.dropped = 0
		}
		n := min(len(o.buf), termPiece)
		piece = append(piece, o.buf[:n]...)
		o.buf = o.buf[n:]
		closed, ready := o.closed, o.ready
		o.mu.Unlock()
		if len(piece) > 0 {
			if err := send(piece); errors.Is(err, errdefs.ErrNotFound) {
				return
			}
			continue
		}
		if closed {
			return
		}
		<-ready
	}
}
