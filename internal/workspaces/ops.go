package workspaces

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/vault"
)

// Direct operations run commands in a workspace without a task: the
// control plane hands each to a worker of the workspace's host, which
// keeps a sandbox with the workspace mounted warm between them.

// Op is one direct operation on a workspace, as a worker receives it:
// the workspace, where it is, and the task whose sandbox it runs in.
type Op struct {
	ID        string                   `json:"id"`
	Workspace Workspace                `json:"workspace"`
	Task      deployments.TaskManifest `json:"task"`
	// DeploymentID holds the task's image sources (copy steps).
	DeploymentID string       `json:"deploymentId"`
	Exec         *ExecRequest `json:"exec,omitempty"`
	// Shell is a request on one of the workspace's shell sessions.
	Shell *ShellRequest `json:"shell,omitempty"`
	// Terminal opens an interactive shell on a terminal of this size
	// (see terminal.go): a data operation (Data DataIn) whose input is
	// the terminal's TerminalInput frames and whose output, streamed,
	// is what the terminal prints (base64 pieces, Stream "stdout").
	Terminal *TerminalSize `json:"terminal,omitempty"`
	// Stream asks the worker to send the output as it comes (OpOutput),
	// line by line, before the result.
	Stream bool `json:"stream,omitempty"`
	// Secrets are the values of the vault secrets Exec refers to
	// (${vault:NAME}), for this operation only; never in its result.
	Secrets map[string]string `json:"secrets,omitempty"`
	// Egress are the egress rules of those of Secrets bound for egress:
	// their values stay in the worker's network stack, and the command
	// gets a placeholder (random per operation) in their place.
	Egress map[string]*vault.Egress `json:"egress,omitempty"`
	// Data, if set, makes a data operation (see Ops.DoData): DataIn, the
	// command's stdin is a stream of bytes the worker reads from the
	// control plane (Ops.Input); DataOut, its stdout is one the worker
	// sends there (Ops.Deliver). Neither travels in the operation.
	Data string `json:"data,omitempty"`
	// File, for a data operation that reads or writes one file at a
	// workspace-relative path, is that path: a worker whose sandbox
	// mounts the workspace from a host directory it shares live may move
	// the bytes there itself, resolving the path as Exec would (nothing
	// that leaves the workspace), instead of through the sandbox.
	File string `json:"file,omitempty"`
	// Attach, with Exec, starts nothing: the worker follows the command
	// a pause of the workspace cut off (CheckpointedError.ExecID), in
	// the resumed sandbox.
	Attach uint64 `json:"attach,omitempty"`
	// Pause asks for the workspace's sandbox to be paused; Resume, for
	// a paused one to be restored (see pause.go).
	Pause  *PauseRequest `json:"pause,omitempty"`
	Resume *Pause        `json:"resume,omitempty"`
}

// OpResult is a worker's answer to an Op: Exec's or Shell's result, or
// Error.
type OpResult struct {
	Exec  *ExecResult  `json:"exec,omitempty"`
	Shell *ShellResult `json:"shell,omitempty"`
	Error string       `json:"error,omitempty"`
	// Host is the host of the worker that ran it: a workspace without one
	// is there from now on.
	Host string `json:"host,omitempty"`
	// Paused answers Pause: the pause, its checkpoint stored.
	Paused *Pause `json:"paused,omitempty"`
	// Checkpointed: a pause of the workspace cut Exec's command off; it
	// goes on in the checkpoint, and this is its exec id there.
	Checkpointed uint64 `json:"checkpointed,omitempty"`
}

// ErrNoOp: no operation came for the worker within its wait.
var ErrNoOp = errors.New("no workspace operation")

// OpQueue is a queue of direct operations in the database that control
// plane replicas share, so that an operation asked of one replica can run
// on a worker that long-polls another. Operations are stored without
// credential values (the replica whose worker takes one fills them in
// again from the vault); results and output come back through it.
type OpQueue interface {
	// QueueOp stores op (JSON) for a worker of host (empty: any worker).
	QueueOp(ctx context.Context, id, host string, op []byte, at time.Time) error
	// ClaimQueuedOp takes the queued operation id for worker by; false
	// when another replica's worker took it first (or it was dropped).
	ClaimQueuedOp(ctx context.Context, id, by string, at time.Time) (bool, error)
	// TakeQueuedOp takes, for worker by, the oldest queued operation a
	// worker of host may run; ErrNoOp when there is none.
	TakeQueuedOp(ctx context.Context, host, by string, at time.Time) (id string, op []byte, err error)
	// FinishQueuedOp stores the result (JSON) of a taken operation;
	// errdefs.ErrNotFound once dropped.
	FinishQueuedOp(ctx context.Context, id string, result []byte) error
	// AppendQueuedOutput stores a piece of its output (JSON); errdefs.ErrNotFound
	// once dropped.
	AppendQueuedOutput(ctx context.Context, id string, out []byte) error
	// QueuedResult returns the result, once there is one, and the worker
	// that took the operation ("" while none has).
	QueuedResult(ctx context.Context, id string) (result []byte, done bool, takenBy string, err error)
	// QueuedOutputs returns the pieces of output after seq, in order.
	QueuedOutputs(ctx context.Context, id string, after int64) ([]QueuedOutput, error)
	// DropQueuedOp removes the operation and its output.
	DropQueuedOp(ctx context.Context, id string) error
	// SweepQueuedOps removes operations queued before t (their requests
	// are long over).
	SweepQueuedOps(ctx context.Context, before time.Time) error
}

// OpNotifier is an OpQueue that tells of its changes, any replica's, as
// they happen: waiting requests and workers read the queue at once
// instead of at their next poll (which stays, in case a notice is lost).
type OpNotifier interface {
	// ListenOps calls changed("") when an operation is queued, and
	// changed(id) when operation id's output or result is stored, until
	// ctx ends; also changed(AnyOp) each time it starts listening (what
	// changed before then went unheard). It reconnects after errors.
	ListenOps(ctx context.Context, changed func(id string))
}

// AnyOp, passed to Ops.Changed, says that anything in the shared queue
// may have changed unheard (a listener that just connected): every
// waiting worker and request reads it again.
const AnyOp = "*"

// QueuedOutput is a piece of output in an OpQueue.
type QueuedOutput struct {
	Seq  int64
	Data []byte
}

// DefaultOpPoll is how often a replica reads the shared queue for the
// result of an operation it queued there, while it waits; a worker
// waiting for an operation reads it for one to take four times as
// seldom (a database round trip every 100 ms per waiting worker).
const DefaultOpPoll = 25 * time.Millisecond

// NotifiedOpPoll is Poll for a shared queue that tells of its changes
// (OpNotifier), in case a notice is lost (while its listener reconnects).
const NotifiedOpPoll = 500 * time.Millisecond

// Ops hands direct operations from API requests to workers and their
// results back. Workers of a host long-poll it for the operations of
// their host's workspaces (and of workspaces no run has used yet, which
// any worker may take). An operation is handed straight to a worker of
// this process that is waiting for one; otherwise it is queued here and,
// with Shared, in the shared queue too, for the workers of every replica.
type Ops struct {
	// Shared, if set, is the queue the control plane replicas share.
	Shared OpQueue
	// Resolve, with Shared, returns the credential values of an operation
	// another replica queued (its ${vault:NAME} references).
	Resolve func(ctx context.Context, op Op) (map[string]string, error)
	// Poll is how often the shared queue is read for results
	// (DefaultOpPoll); workers read it for operations every 4 Poll.
	Poll time.Duration
	// Lost, if set, reports whether a worker has stopped reporting (it
	// died, or lost the control plane): an operation it took fails
	// instead of waiting for a result that will not come. Checked every
	// LostCheck.
	Lost func(ctx context.Context, workerID string) bool

	mu        sync.Mutex
	queue     []*pending
	waiting   map[*waiter]struct{}
	taken     map[string]*pending
	pipes     map[string]*dataPipe // data operations' streams, by id
	lastSweep time.Time

	// Notices of changes in the shared queue (see Changed): queuedC is
	// closed when an operation is queued, opC[id] when operation id's
	// output or result is stored; each is made anew after.
	wakeMu  sync.Mutex
	queuedC chan struct{}
	opC     map[string]chan struct{}
}

type pending struct {
	op     Op
	done   chan OpResult
	output func(stream string, data []byte) // Stream's receiver
	// shared: also in the shared queue, where another replica's worker
	// may take it. remote: taken from the shared queue for another
	// replica's request: its output and result go back there.
	shared, remote bool
	// takenBy is the worker of this replica that took it, if it said.
	takenBy string
}

// OpOutput is a piece of a streamed operation's output: whole lines
// (and the last, unterminated part at its end), redacted.
type OpOutput struct {
	Stream string `json:"stream"` // stdout or stderr
	Data   string `json:"data"`
}

type waiter struct {
	host, worker string
	got          chan *pending
}

// NewOps returns an empty operation queue.
func NewOps() *Ops {
	return &Ops{waiting: map[*waiter]struct{}{}, taken: map[string]*pending{}, pipes: map[string]*dataPipe{}}
}

// Changed tells the replica that the shared queue changed (see
// OpNotifier): id "" that an operation was queued (waiting workers read
// the queue now), AnyOp that anything may have (workers and every waiting
// request read it now), else that operation id's output or result was
// stored (its request reads them now).
func (o *Ops) Changed(id string) {
	o.wakeMu.Lock()
	defer o.wakeMu.Unlock()
	if id == "" || id == AnyOp {
		if o.queuedC != nil {
			close(o.queuedC)
			o.queuedC = nil
		}
	}
	switch id {
	case "":
	case AnyOp:
		for _, c := range o.opC {
			close(c)
		}
		clear(o.opC)
	default:
		if c := o.opC[id]; c != nil {
			close(c)
			delete(o.opC, id)
		}
	}
}

// queued returns the channel Changed("") closes next; nil without a
// shared queue. Taken before reading the queue, it misses no change made
// after the read began.
func (o *Ops) queued() <-chan struct{} {
	if o.Shared == nil {
		return nil
	}
	o.wakeMu.Lock()
	defer o.wakeMu.Unlock()
	if o.queuedC == nil {
		o.queuedC = make(chan struct{})
	}
	return o.queuedC
}

// opChanged returns the channel Changed(id) closes next (see queued).
func (o *Ops) opChanged(id string) <-chan struct{} {
	o.wakeMu.Lock()
	defer o.wakeMu.Unlock()
	if o.opC == nil {
		o.opC = map[string]chan struct{}{}
	}
	c := o.opC[id]
	if c == nil {
		c = make(chan struct{})
		o.opC[id] = c
	}
	return c
}

func (o *Ops) forget(id string) {
	o.wakeMu.Lock()
	delete(o.opC, id)
	o.wakeMu.Unlock()
}

func (o *Ops) poll() time.Duration {
	if o.Poll > 0 {
		return o.Poll
	}
	return DefaultOpPoll
}

// Do queues op for a worker of its workspace's host (any worker if the
// workspace has none yet) and waits for the result, or for ctx to end.
func (o *Ops) Do(ctx context.Context, op Op) (OpResult, error) {
	return o.DoStream(ctx, op, nil)
}

// DoStream is Do, with the output of a streamed operation (op.Stream) to
// output as the worker sends it, one call at a time, before Do returns.
func (o *Ops) DoStream(ctx context.Context, op Op, output func(stream string, data []byte)) (OpResult, error) {
	return o.do(ctx, op, output, 0)
}

// LostCheck is how often a waiting operation's request asks whether the
// worker that took it is lost (see Ops.Lost).
const LostCheck = time.Second

// ErrNotTaken: no worker took the operation within DoWithin's time.
var ErrNotTaken = errors.New("no worker took the operation")

// DoWithin is Do, but an operation no worker has taken after take is
// withdrawn (ErrNotTaken): the caller may send it elsewhere.
func (o *Ops) DoWithin(ctx context.Context, op Op, take time.Duration) (OpResult, error) {
	return o.do(ctx, op, nil, take)
}

// Waiting reports whether a worker of host waits on this replica for an
// operation right now.
func (o *Ops) Waiting(host string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for w := range o.waiting {
		if w.host == host {
			return true
		}
	}
	return false
}

func (o *Ops) do(ctx context.Context, op Op, output func(stream string, data []byte), take time.Duration) (OpResult, error) {
	if op.ID == "" {
		op.ID = newOpID()
	}
	op.Stream = output != nil
	p := &pending{op: op, done: make(chan OpResult, 1), output: output}
	o.mu.Lock()
	handed := false
	for w := range o.waiting {
		if fits(w.host, op) {
			delete(o.waiting, w)
			p.takenBy = w.worker
			o.taken[op.ID] = p
			w.got <- p
			handed = true
			break
		}
	}
	if !handed {
		o.queue = append(o.queue, p)
		p.shared = o.Shared != nil
	}
	o.mu.Unlock()
	abandon := func() {
		o.mu.Lock()
		delete(o.taken, op.ID)
		o.unqueue(p)
		o.mu.Unlock()
	}
	var (
		tick    <-chan time.Time
		changed <-chan struct{}
	)
	if p.shared {
		changed = o.opChanged(op.ID) // before queueing: no change goes unheard
		defer o.forget(op.ID)
		o.sweep(ctx)
		stored := op
		stored.Secrets = nil // never in the database
		data, err := json.Marshal(stored)
		if err == nil {
			err = o.Shared.QueueOp(ctx, op.ID, op.Workspace.Host, data, time.Now())
		}
		if err != nil {
			abandon()
			return OpResult{}, fmt.Errorf("workspace %s: queue the operation: %w", op.Workspace.ID, err)
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = o.Shared.DropQueuedOp(dctx, op.ID)
		}()
		t := time.NewTicker(o.poll())
		defer t.Stop()
		tick = t.C
	}
	var seen int64
	var lostTick <-chan time.Time
	if o.Lost != nil {
		t := time.NewTicker(LostCheck)
		defer t.Stop()
		lostTick = t.C
	}
	var deadline <-chan time.Time
	if take > 0 {
		t := time.NewTimer(take)
		defer t.Stop()
		deadline = t.C
	}
	for {
		select {
		case res := <-p.done:
			return res, nil
		case <-ctx.Done():
			abandon()
			return OpResult{}, fmt.Errorf("workspace %s: no worker answered: %w", op.Workspace.ID, context.Cause(ctx))
		case <-deadline:
			if o.withdraw(ctx, p) {
				return OpResult{}, fmt.Errorf("workspace %s: %w within %s", op.Workspace.ID, ErrNotTaken, take)
			}
			continue // taken: wait for its result
		case <-lostTick:
			o.mu.Lock()
			_, local := o.taken[op.ID]
			by := p.takenBy
			o.mu.Unlock()
			if !local && p.shared {
				_, _, by, _ = o.Shared.QueuedResult(ctx, op.ID)
			}
			if by != "" && o.Lost(ctx, by) {
				abandon()
				return OpResult{}, errdefs.Unavailablef("workspace %s: worker %s, which took the operation, stopped reporting before it answered; what it did of it is unknown", op.Workspace.ID, by)
			}
			continue
		case <-tick:
		case <-changed:
		}
		changed = o.opChanged(op.ID)
		o.mu.Lock()
		_, local := o.taken[op.ID]
		o.mu.Unlock()
		if local {
			continue // a worker of this process runs it
		}
		// Read the result first: output is stored before it, so what
		// is read after it is all there is.
		data, ok, _, err := o.Shared.QueuedResult(ctx, op.ID)
		if err != nil {
			continue
		}
		outs, err := o.Shared.QueuedOutputs(ctx, op.ID, seen)
		if err != nil {
			continue
		}
		for _, q := range outs {
			seen = q.Seq
			var out OpOutput
			if output != nil && json.Unmarshal(q.Data, &out) == nil {
				output(out.Stream, []byte(out.Data))
			}
		}
		if ok {
			abandon() // taken by another replica's worker: not ours to hand out
			var res OpResult
			if err := json.Unmarshal(data, &res); err != nil {
				return OpResult{}, fmt.Errorf("workspace %s: the operation's result: %w", op.Workspace.ID, err)
			}
			return res, nil
		}
	}
}

// withdraw takes p back if no worker took it (true), from the local queue
// and, if it is there too, from the shared one.
func (o *Ops) withdraw(ctx context.Context, p *pending) bool {
	o.mu.Lock()
	queued := false
	for _, q := range o.queue {
		queued = queued || q == p
	}
	if !queued {
		o.mu.Unlock()
		return false // a worker of this replica has it
	}
	o.unqueue(p)
	o.mu.Unlock()
	if !p.shared {
		return true
	}
	// Claiming it here means no other replica's worker did.
	ok, err := o.Shared.ClaimQueuedOp(ctx, p.op.ID, "", time.Now())
	if err == nil && ok {
		return true
	}
	o.mu.Lock()
	o.queue = append(o.queue, p) // another replica's worker took it: its result comes through the queue
	o.mu.Unlock()
	return false
}

func newOpID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return "op_" + hex.EncodeToString(b)
}

// unqueue removes p from the local queue; o.mu is held.
func (o *Ops) unqueue(p *pending) {
	for i, q := range o.queue {
		if q == p {
			o.queue = append(o.queue[:i], o.queue[i+1:]...)
			return
		}
	}
}

// sweep removes, at most once a minute, shared operations whose requests
// are long over (a replica that stopped while waiting leaves them).
func (o *Ops) sweep(ctx context.Context) {
	o.mu.Lock()
	due := time.Since(o.lastSweep) > time.Minute
	if due {
		o.lastSweep = time.Now()
	}
	o.mu.Unlock()
	if due {
		_ = o.Shared.SweepQueuedOps(ctx, time.Now().Add(-(MaxExecTimeout*time.Second + 10*time.Minute)))
	}
}

func fits(host string, op Op) bool {
	return op.Workspace.Host == "" || op.Workspace.Host == host
}

// Next returns an operation for a worker of host, waiting until one comes
// or ctx ends (ErrNoOp).
func (o *Ops) Next(ctx context.Context, host string) (Op, error) {
	return o.NextFor(ctx, "", host)
}

// NextFor is Next for worker workerID: should that worker stop
// reporting (see Lost) before it answers, the operation's request fails
// rather than waiting for ever.
func (o *Ops) NextFor(ctx context.Context, workerID, host string) (Op, error) {
	var tick <-chan time.Time
	if o.Shared != nil {
		t := time.NewTicker(4 * o.poll())
		defer t.Stop()
		tick = t.C
	}
	// With a shared queue, read it at once, then on each tick or notice.
	queued, readNow := o.queued(), o.Shared != nil
	for {
		op, w, err := o.nextLocal(ctx, workerID, host)
		if w == nil || err != nil {
			return op, err
		}
		// Wait for an operation handed to this worker, or, with a shared
		// queue, read it now and then.
		stopWaiting := func() (*pending, bool) {
			o.mu.Lock()
			delete(o.waiting, w)
			o.mu.Unlock()
			select {
			case p := <-w.got: // handed over just now
				return p, true
			default:
				return nil, false
			}
		}
		if !readNow {
			select {
			case p := <-w.got:
				return p.op, nil
			case <-ctx.Done():
				if p, ok := stopWaiting(); ok {
					return p.op, nil
				}
				return Op{}, ErrNoOp
			case <-tick:
			case <-queued:
			}
		}
		readNow = false
		if p, ok := stopWaiting(); ok {
			return p.op, nil
		}
		queued = o.queued()
		id, data, err := o.Shared.TakeQueuedOp(ctx, host, workerID, time.Now())
		if err != nil {
			continue // none (or the database is away): wait on
		}
		if op, err := o.takeShared(ctx, id, data); err == nil {
			return op, nil
		}
	}
}

// nextLocal takes the first operation of the local queue a worker of
// host may run (claiming it in the shared queue, where another replica's
// worker may have taken it first), or, if there is none, registers a
// waiter for the next one and returns it.
func (o *Ops) nextLocal(ctx context.Context, workerID, host string) (Op, *waiter, error) {
	for {
		o.mu.Lock()
		var p *pending
		for _, q := range o.queue {
			if fits(host, q.op) {
				p = q
				o.unqueue(q)
				break
			}
		}
		if p == nil {
			w := &waiter{host: host, worker: workerID, got: make(chan *pending, 1)}
			o.waiting[w] = struct{}{}
			o.mu.Unlock()
			return Op{}, w, nil
		}
		if !p.shared {
			p.takenBy = workerID
			o.taken[p.op.ID] = p
			o.mu.Unlock()
			return p.op, nil, nil
		}
		o.mu.Unlock()
		ok, err := o.Shared.ClaimQueuedOp(ctx, p.op.ID, workerID, time.Now())
		if err != nil {
			o.mu.Lock()
			o.queue = append(o.queue, p) // still queued, for others
			o.mu.Unlock()
			return Op{}, nil, err
		}
		if ok {
			o.mu.Lock()
			p.takenBy = workerID
			o.taken[p.op.ID] = p
			o.mu.Unlock()
			return p.op, nil, nil
		}
		// Another replica's worker took it: look further.
	}
}

// takeShared makes an operation taken from the shared queue this
// process's: its own (queued here too), or another replica's, with its
// credential values filled in again.
func (o *Ops) takeShared(ctx context.Context, id string, data []byte) (Op, error) {
	o.mu.Lock()
	for _, q := range o.queue {
		if q.op.ID == id {
			o.unqueue(q)
			o.taken[id] = q
			o.mu.Unlock()
			return q.op, nil
		}
	}
	o.mu.Unlock()
	var op Op
	if err := json.Unmarshal(data, &op); err != nil {
		_ = o.Shared.FinishQueuedOp(ctx, id, mustJSON(OpResult{Error: "the queued operation is unreadable: " + err.Error()}))
		return Op{}, ErrNoOp
	}
	if len(op.Refs().VaultNames()) > 0 {
		var err error
		if o.Resolve == nil {
			err = errors.New("this control plane has no vault")
		} else {
			op.Secrets, err = o.Resolve(ctx, op)
		}
		if err != nil {
			_ = o.Shared.FinishQueuedOp(ctx, id, mustJSON(OpResult{Error: "fill in the operation's credentials: " + err.Error()}))
			return Op{}, ErrNoOp
		}
	}
	o.mu.Lock()
	o.taken[id] = &pending{op: op, remote: true}
	o.mu.Unlock()
	return op, nil
}

// Refs is what of op may refer to vault secrets, as an exec request.
func (op Op) Refs() ExecRequest {
	switch {
	case op.Exec != nil:
		return *op.Exec
	case op.Shell != nil:
		return op.Shell.exec()
	}
	return ExecRequest{}
}

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

// Output delivers a piece of a streamed operation's output; an operation
// nobody waits for any more is errdefs.ErrNotFound.
func (o *Ops) Output(ctx context.Context, id string, out OpOutput) error {
	o.mu.Lock()
	p, ok := o.taken[id]
	o.mu.Unlock()
	if !ok {
		return fmt.Errorf("workspace operation %s: %w", id, errdefs.ErrNotFound)
	}
	if p.remote {
		return o.Shared.AppendQueuedOutput(ctx, id, mustJSON(out))
	}
	if p.output != nil {
		p.output(out.Stream, []byte(out.Data))
	}
	return nil
}

// Finish delivers a worker's result for operation id; an operation nobody
// waits for any more (its request ended) is errdefs.ErrNotFound.
func (o *Ops) Finish(ctx context.Context, id string, res OpResult) error {
	o.mu.Lock()
	p, ok := o.taken[id]
	delete(o.taken, id)
	o.mu.Unlock()
	if !ok {
		return fmt.Errorf("workspace operation %s: %w", id, errdefs.ErrNotFound)
	}
	if p.remote {
		return o.Shared.FinishQueuedOp(ctx, id, mustJSON(res))
	}
	p.done <- res
	return nil
}
