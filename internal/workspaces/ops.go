package workspaces

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/helmr/helmr/internal/deployments"
)

// Direct operations run commands in a workspace without a task: the
// control plane hands each to a worker of the workspace's host, which
// keeps a sandbox with the workspace mounted warm between them.

// Limits of one exec.
const (
	DefaultExecTimeout = 60      // seconds
	MaxExecTimeout     = 3600    // seconds
	MaxOutputBytes     = 1 << 20 // per stream; the rest is cut, with a marker
	MaxStdinBytes      = 1 << 20
)

// ExecRequest runs one command in a workspace: Argv as is, or Command
// through /bin/sh -c. Cwd is relative to the workspace (default: the
// workspace itself) or an absolute path inside it.
type ExecRequest struct {
	Argv           []string          `json:"argv,omitempty"`
	Command        string            `json:"command,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Stdin          string            `json:"stdin,omitempty"`
	TimeoutSeconds float64           `json:"timeoutSeconds,omitempty"`
}

// ExecResult is how the command ended and what it printed.
type ExecResult struct {
	ExitCode        int     `json:"exitCode"`
	Signal          string  `json:"signal,omitempty"`
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	StdoutTruncated bool    `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool    `json:"stderrTruncated,omitempty"`
	TimedOut        bool    `json:"timedOut,omitempty"`
	DurationMs      float64 `json:"durationMs"`
}

// Op is one direct operation on a workspace, as a worker receives it:
// the workspace, where it is, and the task whose sandbox it runs in.
type Op struct {
	ID        string                   `json:"id"`
	Workspace Workspace                `json:"workspace"`
	Task      deployments.TaskManifest `json:"task"`
	// DeploymentID holds the task's image sources (copy steps).
	DeploymentID string       `json:"deploymentId"`
	Exec         *ExecRequest `json:"exec,omitempty"`
	// Stream asks the worker to send the output as it comes (OpOutput),
	// line by line, before the result.
	Stream bool `json:"stream,omitempty"`
	// Secrets are the values of the vault secrets Exec refers to
	// (${vault:NAME}), for this operation only; never in its result.
	Secrets map[string]string `json:"secrets,omitempty"`
}

// OpResult is a worker's answer to an Op: Exec's result, or Error.
type OpResult struct {
	Exec  *ExecResult `json:"exec,omitempty"`
	Error string      `json:"error,omitempty"`
	// Host is the host of the worker that ran it: a workspace without one
	// is there from now on.
	Host string `json:"host,omitempty"`
}

// ErrNoOp: no operation came for the worker within its wait.
var ErrNoOp = errors.New("no workspace operation")

// Ops hands direct operations from API requests to workers and their
// results back. It lives in one control plane process: workers of a host
// long-poll it for the operations of their host's workspaces (and of
// workspaces no run has used yet, which any worker may take).
type Ops struct {
	mu      sync.Mutex
	queue   []*pending
	waiting map[*waiter]struct{}
	taken   map[string]*pending
}

type pending struct {
	op     Op
	done   chan OpResult
	output func(stream string, data []byte) // Stream's receiver
}

// OpOutput is a piece of a streamed operation's output: whole lines
// (and the last, unterminated part at its end), redacted.
type OpOutput struct {
	Stream string `json:"stream"` // stdout or stderr
	Data   string `json:"data"`
}

type waiter struct {
	host string
	got  chan *pending
}

// NewOps returns an empty operation queue.
func NewOps() *Ops {
	return &Ops{waiting: map[*waiter]struct{}{}, taken: map[string]*pending{}}
}

// Do queues op for a worker of its workspace's host (any worker if the
// workspace has none yet) and waits for the result, or for ctx to end.
func (o *Ops) Do(ctx context.Context, op Op) (OpResult, error) {
	return o.DoStream(ctx, op, nil)
}

// DoStream is Do, with the output of a streamed operation (op.Stream) to
// output as the worker sends it, one call at a time, before Do returns.
func (o *Ops) DoStream(ctx context.Context, op Op, output func(stream string, data []byte)) (OpResult, error) {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	op.ID = "op_" + hex.EncodeToString(b)
	op.Stream = output != nil
	p := &pending{op: op, done: make(chan OpResult, 1), output: output}
	o.mu.Lock()
	handed := false
	for w := range o.waiting {
		if fits(w.host, op) {
			delete(o.waiting, w)
			o.taken[op.ID] = p
			w.got <- p
			handed = true
			break
		}
	}
	if !handed {
		o.queue = append(o.queue, p)
	}
	o.mu.Unlock()
	select {
	case res := <-p.done:
		return res, nil
	case <-ctx.Done():
		o.mu.Lock()
		delete(o.taken, op.ID)
		for i, q := range o.queue {
			if q == p {
				o.queue = append(o.queue[:i], o.queue[i+1:]...)
				break
			}
		}
		o.mu.Unlock()
		return OpResult{}, fmt.Errorf("workspace %s: no worker answered: %w", op.Workspace.ID, context.Cause(ctx))
	}
}

func fits(host string, op Op) bool {
	return op.Workspace.Host == "" || op.Workspace.Host == host
}

// Next returns an operation for a worker of host, waiting until one comes
// or ctx ends (ErrNoOp).
func (o *Ops) Next(ctx context.Context, host string) (Op, error) {
	o.mu.Lock()
	for i, p := range o.queue {
		if fits(host, p.op) {
			o.queue = append(o.queue[:i], o.queue[i+1:]...)
			o.taken[p.op.ID] = p
			o.mu.Unlock()
			return p.op, nil
		}
	}
	w := &waiter{host: host, got: make(chan *pending, 1)}
	o.waiting[w] = struct{}{}
	o.mu.Unlock()
	select {
	case p := <-w.got:
		return p.op, nil
	case <-ctx.Done():
		o.mu.Lock()
		delete(o.waiting, w)
		o.mu.Unlock()
		select {
		case p := <-w.got: // handed over just now
			return p.op, nil
		default:
		}
		return Op{}, ErrNoOp
	}
}

// Output delivers a piece of a streamed operation's output; an operation
// nobody waits for any more is ErrNotFound.
func (o *Ops) Output(id string, out OpOutput) error {
	o.mu.Lock()
	p, ok := o.taken[id]
	o.mu.Unlock()
	if !ok {
		return fmt.Errorf("workspace operation %s: %w", id, ErrNotFound)
	}
	if p.output != nil {
		p.output(out.Stream, []byte(out.Data))
	}
	return nil
}

// Finish delivers a worker's result for operation id; an operation nobody
// waits for any more (its request ended) is ErrNotFound.
func (o *Ops) Finish(id string, res OpResult) error {
	o.mu.Lock()
	p, ok := o.taken[id]
	delete(o.taken, id)
	o.mu.Unlock()
	if !ok {
		return fmt.Errorf("workspace operation %s: %w", id, ErrNotFound)
	}
	p.done <- res
	return nil
}

// vaultRef is a credential placeholder in an exec request: ${vault:NAME}
// stands for the value of the vault secret NAME of the workspace's
// project environment, put in by the worker for that exec only.
var vaultRef = regexp.MustCompile(`\$\{vault:([A-Za-z_][A-Za-z0-9_]*)\}`)

// VaultNames lists the vault secrets req refers to, sorted.
func (req ExecRequest) VaultNames() []string {
	seen := map[string]bool{}
	scan := func(s string) {
		for _, m := range vaultRef.FindAllStringSubmatch(s, -1) {
			seen[m[1]] = true
		}
	}
	for _, a := range req.Argv {
		scan(a)
	}
	scan(req.Command)
	scan(req.Stdin)
	for _, v := range req.Env {
		scan(v)
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// WithSecrets returns req with every ${vault:NAME} replaced by its value.
func (req ExecRequest) WithSecrets(values map[string]string) ExecRequest {
	if len(values) == 0 {
		return req
	}
	put := func(s string) string {
		return vaultRef.ReplaceAllStringFunc(s, func(m string) string {
			if v, ok := values[vaultRef.FindStringSubmatch(m)[1]]; ok {
				return v
			}
			return m
		})
	}
	out := req
	out.Argv = make([]string, len(req.Argv))
	for i, a := range req.Argv {
		out.Argv[i] = put(a)
	}
	out.Command, out.Stdin = put(req.Command), put(req.Stdin)
	if req.Env != nil {
		out.Env = map[string]string{}
		for k, v := range req.Env {
			out.Env[k] = put(v)
		}
	}
	return out
}

// Redact replaces every value of values in s with [redacted:NAME],
// longest values first.
func Redact(s string, values map[string]string) string {
	names := make([]string, 0, len(values))
	for n, v := range values {
		if v != "" {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool { return len(values[names[i]]) > len(values[names[j]]) })
	for _, n := range names {
		s = strings.ReplaceAll(s, values[n], "[redacted:"+n+"]")
	}
	return s
}

// SafeCut returns where to cut s, at most at limit, so that no occurrence
// of a value in values is split (which would leave a prefix of it that
// Redact cannot recognise): limit, or the start of an occurrence that
// straddles it.
func SafeCut(s string, limit int, values map[string]string) int {
	if limit >= len(s) {
		return len(s)
	}
	for moved := true; moved; {
		moved = false
		for _, v := range values {
			if len(v) < 2 {
				continue
			}
			// Every occurrence straddling limit lies in this window.
			lo, hi := max(0, limit-len(v)+1), min(len(s), limit+len(v)-1)
			if i := strings.Index(s[lo:hi], v); i >= 0 {
				limit, moved = lo+i, true
			}
		}
	}
	return limit
}

// Lookahead is how many bytes past a cut SafeCut needs to see to know
// that no value straddles it: the longest value's length less one.
func Lookahead(values map[string]string) int {
	n := 0
	for _, v := range values {
		n = max(n, len(v)-1)
	}
	return n
}

// Redact returns the result with every secret value replaced.
func (r ExecResult) Redact(values map[string]string) ExecResult {
	r.Stdout, r.Stderr = Redact(r.Stdout, values), Redact(r.Stderr, values)
	return r
}
