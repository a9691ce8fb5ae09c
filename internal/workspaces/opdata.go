package workspaces

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/helmr/helmr/internal/errdefs"
)

// Data operations move a file's (or a tar's) bytes through a workspace's
// sandbox as a stream, not inside operations: the operation, queued like
// any other, carries only the command (`cat > path`, `cat path`, tar);
// its worker reads the command's stdin from the control plane, or sends
// its stdout there, over a data path keyed by the operation's id
// (in-process for helmr dev's worker; GET and PUT
// /v1/worker/ops/{id}/data for remote workers), and the agent streams
// them into and out of the process.
//
// Which replica holds the bytes: the request's. Its worker, if it takes
// the operation (helmr dev, or a server whose workers long-poll it),
// reads from and writes to the request directly (Ops.pipes). With a
// shared queue a worker of another replica may take it instead; the two
// replicas then meet where the control plane keeps its other blobs
// (Staging: the data dir's blobs today, object storage once blobs move
// there): an upload is staged there before the operation is queued (the
// request's replica cannot know who will take it), and a download that
// did not reach the request directly is read from there once the result
// is in. Staging costs a write and a read of the bytes; it is the simple,
// always-correct meeting point, and only multi-replica setups pay it.

// Data operation directions (Op.Data).
const (
	DataIn  = "stdin"  // the command's stdin is the request's bytes
	DataOut = "stdout" // the command's stdout is the request's answer
)

// Staging holds the bytes of data operations between replicas
// (checkpoints.Blobs).
type Staging interface {
	Put(ctx context.Context, id string, r io.Reader) (int64, error)
	Get(ctx context.Context, id string) (io.ReadCloser, error)
	Delete(ctx context.Context, id string) error
}

// stagedID is the blob that holds operation id's bytes in direction dir
// ("opd_" and the id's hex, then "in" or "out").
func stagedID(id, dir string) string {
	suffix := "out"
	if dir == DataIn {
		suffix = "in"
	}
	return "opd_" + strings.TrimPrefix(id, "op_") + suffix
}

// dataPipe is a data operation's stream, as the request gave it: in
// (DataIn) to read the command's stdin from, or out (DataOut) to write its
// stdout to. Its user (a worker, through Input or Deliver) holds mu for
// each read or write, so that once the request closes it nothing touches
// in or out again.
type dataPipe struct {
	mu        sync.Mutex
	in        io.Reader
	out       io.Writer
	closed    bool
	delivered bool  // out got the worker's stream (not staged)
	n         int64 // bytes moved
	err       error // the stream's first failure
}

func (p *dataPipe) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// close ends the pipe's use, waiting for a read or write under way.
func (p *dataPipe) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

// errPipeClosed: the request the stream belonged to is over.
var errPipeClosed = errors.New("the request for this operation's data is over")

// DoData is Do for a data operation: op.Exec's stdin is read from in, or
// (in nil) its stdout written to out, as the worker streams them. It
// returns the result (whose Stdout is empty for a download) and the bytes
// moved; a failure of in or out (a read error, a write error, a limit
// they enforce) is the error, whatever the worker says. in is read only
// until DoData returns (one read under way then is waited for).
func (o *Ops) DoData(ctx context.Context, op Op, in io.Reader, out io.Writer) (OpResult, int64, error) {
	op.ID = newOpID()
	p := &dataPipe{in: in, out: out}
	op.Data = DataOut
	if in != nil {
		op.Data = DataIn
	}
	if in != nil && o.Shared != nil {
		if o.Staging == nil {
			return OpResult{}, 0, errdefs.Unavailablef("this control plane has no blob store to stage a transfer in")
		}
		n, err := o.Staging.Put(ctx, stagedID(op.ID, DataIn), in)
		if err != nil {
			return OpResult{}, 0, fmt.Errorf("stage the data: %w", err)
		}
		defer o.dropStaged(ctx, op.ID, DataIn)
		p.in, p.n = nil, n // every worker reads it from Staging
	}
	o.mu.Lock()
	if o.pipes == nil {
		o.pipes = map[string]*dataPipe{}
	}
	o.pipes[op.ID] = p
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		delete(o.pipes, op.ID)
		o.mu.Unlock()
		p.close()
	}()
	res, err := o.DoStream(ctx, op, nil)
	if err != nil {
		return res, 0, err
	}
	p.mu.Lock()
	n, perr, delivered := p.n, p.err, p.delivered
	p.mu.Unlock()
	if perr != nil {
		return res, n, perr
	}
	if out != nil && !delivered && res.Error == "" && o.Shared != nil && o.Staging != nil {
		n, err = o.fetchStaged(ctx, op.ID, out)
	}
	return res, n, err
}

// fetchStaged copies a download another replica's worker staged to out.
func (o *Ops) fetchStaged(ctx context.Context, id string, out io.Writer) (int64, error) {
	defer o.dropStaged(ctx, id, DataOut)
	rc, err := o.Staging.Get(ctx, stagedID(id, DataOut))
	if err != nil {
		return 0, errdefs.Upstreamf("the worker's data for operation %s: %v", id, err)
	}
	defer rc.Close()
	return io.Copy(out, rc)
}

func (o *Ops) dropStaged(ctx context.Context, id, dir string) {
	_ = o.Staging.Delete(context.WithoutCancel(ctx), stagedID(id, dir))
}

func (o *Ops) pipe(id string) *dataPipe {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pipes[id]
}

// Input opens the bytes a worker feeds to data operation id's stdin:
// from the request, if it is this replica's, else from Staging. An
// operation nobody waits for is errdefs.ErrNotFound. The caller closes
// it.
func (o *Ops) Input(ctx context.Context, id string) (io.ReadCloser, error) {
	if p := o.pipe(id); p != nil && p.in != nil {
		return &pipeReader{p: p}, nil
	}
	if o.Shared != nil && o.Staging != nil {
		rc, err := o.Staging.Get(ctx, stagedID(id, DataIn))
		if err == nil {
			return rc, nil
		}
		if !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("the input of workspace operation %s: %w", id, errdefs.ErrNotFound)
}

// pipeReader reads a request's upload for a worker.
type pipeReader struct {
	p    *dataPipe
	done bool
}

func (r *pipeReader) Read(b []byte) (int, error) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.done || p.closed {
		return 0, errPipeClosed
	}
	n, err := p.in.Read(b)
	p.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		p.fail(err)
	}
	return n, err
}

// Close ends the worker's reading; the request's body stays the
// request's.
func (r *pipeReader) Close() error {
	r.p.mu.Lock()
	r.done = true
	r.p.mu.Unlock()
	return nil
}

// deliverChunk is how much of a download Deliver moves per write.
const deliverChunk = 256 << 10

// Deliver takes the stdout of data operation id, read from r to its end:
// into the request, if it is this replica's, else into Staging, for the
// request's replica to fetch. An operation nobody waits for is
// errdefs.ErrNotFound; a request that stops taking the bytes (it ended,
// or its writer failed) is an error, and r is left unread.
func (o *Ops) Deliver(ctx context.Context, id string, r io.Reader) (int64, error) {
	p := o.pipe(id)
	if p == nil || p.out == nil {
		if o.Shared != nil && o.Staging != nil {
			return o.Staging.Put(ctx, stagedID(id, DataOut), r)
		}
		return 0, fmt.Errorf("the output of workspace operation %s: %w", id, errdefs.ErrNotFound)
	}
	buf := make([]byte, deliverChunk)
	var total int64
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				return total, errPipeClosed
			}
			p.delivered = true
			_, werr := p.out.Write(buf[:n])
			if werr == nil {
				p.n += int64(n)
				total += int64(n)
			} else {
				p.fail(werr)
			}
			p.mu.Unlock()
			if werr != nil {
				return total, werr
			}
		}
		if errors.Is(rerr, io.EOF) {
			p.mu.Lock()
			p.delivered = true // an empty stream too
			p.mu.Unlock()
			return total, nil
		}
		if rerr != nil {
			p.mu.Lock()
			p.fail(fmt.Errorf("the worker's stream broke off: %w", rerr))
			p.mu.Unlock()
			return total, rerr
		}
	}
}
