package workspaces

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

// TestOps hands operations to workers of the right host, queued or to a
// waiting worker, and results back; an unanswered request ends with its
// context and its late result is refused.
func TestOps(t *testing.T) {
	o := NewOps()
	ctx := context.Background()
	serve := func(host string, answer int) {
		t.Helper()
		go func() {
			op, err := o.Next(ctx, host)
			if err != nil {
				t.Errorf("Next(%s): %v", host, err)
				return
			}
			if err := o.Finish(ctx, op.ID, OpResult{Exec: &ExecResult{ExitCode: answer}}); err != nil {
				t.Errorf("Finish: %v", err)
			}
		}()
	}
	// A worker of another host does not take h1's operation.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	h2done := make(chan struct{})
	go func() {
		defer close(h2done)
		if op, err := o.Next(wctx, "h2"); !errors.Is(err, ErrNoOp) {
			t.Errorf("Next(h2) = %+v, %v; want nothing (the operation is h1's)", op, err)
		}
	}()
	serve("h1", 7)
	res, err := o.Do(ctx, Op{Workspace: Workspace{ID: "ws_1", Host: "h1"}})
	if err != nil || res.Exec.ExitCode != 7 {
		t.Fatalf("Do(h1) = %+v, %v; want h1's answer", res, err)
	}
	<-h2done // gone, so the next operation cannot go to it
	cancel()

	// Queued before any worker asks; a workspace without a host goes to any.
	done := make(chan OpResult, 1)
	go func() {
		res, err := o.Do(ctx, Op{Workspace: Workspace{ID: "ws_2"}})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	time.Sleep(20 * time.Millisecond)
	serve("h9", 3)
	if res := <-done; res.Exec == nil || res.Exec.ExitCode != 3 {
		t.Errorf("Do(no host) = %+v, want the answer of whichever worker took it", res)
	}

	// No worker: the request ends with its context; nothing stays queued.
	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := o.Do(short, Op{Workspace: Workspace{ID: "ws_3", Host: "gone"}}); err == nil {
		t.Error("Do without a worker succeeded")
	}
	if n := len(o.queue); n != 0 {
		t.Errorf("%d operations queued after their requests ended", n)
	}
	if err := o.Finish(ctx, "op_unknown", OpResult{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Finish(unknown) = %v, want errdefs.ErrNotFound", err)
	}
}

func TestVaultRefs(t *testing.T) {
	req := ExecRequest{
		Argv:    []string{"curl", "-H", "Authorization: Bearer ${vault:API_TOKEN}", "${vault:nope-bad}"},
		Command: "echo ${vault:B}", Stdin: "${vault:C}",
		Env: map[string]string{"X": "pre-${vault:API_TOKEN}-post", "Y": "$HOME"},
	}
	if got := req.VaultNames(); !slices.Equal(got, []string{"API_TOKEN", "B", "C"}) {
		t.Errorf("VaultNames = %v", got)
	}
	vals := map[string]string{"API_TOKEN": "s3cr3t", "B": "bee", "C": "see"}
	put := req.WithSecrets(vals)
	if put.Argv[2] != "Authorization: Bearer s3cr3t" || put.Argv[3] != "${vault:nope-bad}" || put.Command != "echo bee" ||
		put.Stdin != "see" || put.Env["X"] != "pre-s3cr3t-post" || put.Env["Y"] != "$HOME" {
		t.Errorf("WithSecrets = %+v", put)
	}
	if req.Argv[2] != "Authorization: Bearer ${vault:API_TOKEN}" || req.Env["X"] != "pre-${vault:API_TOKEN}-post" {
		t.Errorf("WithSecrets changed the request it was given: %+v", req)
	}
	res := ExecResult{Stdout: "token s3cr3t and s3cr3ts3cr3t", Stderr: "bee"}.Redact(vals)
	if res.Stdout != "token [redacted:API_TOKEN] and [redacted:API_TOKEN][redacted:API_TOKEN]" || res.Stderr != "[redacted:B]" {
		t.Errorf("Redact = %+v", res)
	}
}

func TestSafeCut(t *testing.T) {
	values := map[string]string{"A": "secret-value", "B": "xy", "C": "s"}
	s := "0123456789secret-value0123"
	for limit := 0; limit <= len(s)+1; limit++ {
		n := SafeCut(s, limit, values)
		switch {
		case n > limit || n > len(s):
			t.Errorf("SafeCut(%d) = %d, past the limit", limit, n)
		case limit > 10 && limit < 22 && n != 10:
			t.Errorf("SafeCut(%d) = %d, want 10 (before the value straddling it)", limit, n)
		case (limit <= 10 || limit >= 22) && n != min(limit, len(s)):
			t.Errorf("SafeCut(%d) = %d, want the limit", limit, n)
		}
		if red := Redact(s[:n], values); strings.Contains(red, "secret-") {
			t.Errorf("cut at %d leaves %q", n, red)
		}
	}
	// Overlapping values: moving before one may land inside another.
	values = map[string]string{"A": "abcd", "B": "cdef"}
	if n := SafeCut("..abcdef..", 5, values); n != 2 {
		t.Errorf("SafeCut(overlapping) = %d, want 2", n)
	}
	// The longest form of either is its hex, 8 characters.
	if Lookahead(values) != 7 || Lookahead(nil) != 0 {
		t.Errorf("Lookahead = %d, %d", Lookahead(values), Lookahead(nil))
	}
}

// TestChangedAnyOpWakesEveryone: a listener that (re)connects says that
// anything may have changed unheard; waiting workers and every waiting
// request then read the shared queue again, not just the workers (a
// request whose result was stored before its replica listened would
// otherwise wait for its next poll).
func TestChangedAnyOpWakesEveryone(t *testing.T) {
	o := NewOps()
	o.Shared = struct{ OpQueue }{} // only its presence matters here
	queued, op1, op2 := o.queued(), o.opChanged("op_1"), o.opChanged("op_2")
	o.Changed("")
	select {
	case <-queued:
	default:
		t.Error(`Changed("") did not wake the waiting workers`)
	}
	select {
	case <-op1:
		t.Error(`Changed("") woke a request`)
	default:
	}
	o.Changed(AnyOp)
	for name, c := range map[string]<-chan struct{}{"op_1": op1, "op_2": op2} {
		select {
		case <-c:
		default:
			t.Errorf("Changed(AnyOp) did not wake the request of %s", name)
		}
	}
	if again := o.opChanged("op_1"); again == op1 {
		t.Error("after Changed(AnyOp), opChanged returns the closed channel again")
	}
}

// TestDoWithin withdraws an operation no worker took in time (no worker
// gets it afterwards), and waits for the result of one a worker took.
func TestDoWithin(t *testing.T) {
	o := NewOps()
	ctx := t.Context()
	op := Op{Workspace: Workspace{ID: "ws_1", Host: "h1"}, Resume: &Pause{}}
	if _, err := o.DoWithin(ctx, op, 50*time.Millisecond); !errors.Is(err, ErrNotTaken) {
		t.Fatalf("DoWithin(no worker of h1) = %v, want ErrNotTaken", err)
	}
	nctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if got, err := o.Next(nctx, "h1"); err == nil {
		t.Fatalf("a worker of h1 got %+v after it was withdrawn", got)
	}
	if o.Waiting("h1") {
		t.Error("Waiting(h1) with no worker asking")
	}
	// A worker that takes it in time answers, however long it takes.
	go func() {
		got, err := o.Next(ctx, "h1")
		if err != nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
		_ = o.Finish(ctx, got.ID, OpResult{Host: "h1"})
	}()
	for !o.Waiting("h1") {
		time.Sleep(time.Millisecond)
	}
	res, err := o.DoWithin(ctx, op, 50*time.Millisecond)
	if err != nil || res.Host != "h1" {
		t.Errorf("DoWithin(taken) = %+v, %v; want the worker's result", res, err)
	}
}

// TestOpsTakerLost: a worker takes an operation and is lost before it
// answers (killed): the request fails, naming it, instead of waiting for
// ever; through a shared queue too, where the worker long-polls another
// replica. An operation whose worker is alive waits on.
func TestOpsTakerLost(t *testing.T) {
	for _, shared := range []bool{false, true} {
		q := newMemQueue()
		lost := map[string]bool{"w-dead": true}
		mk := func() *Ops {
			o := NewOps()
			o.Lost = func(_ context.Context, id string) bool { return lost[id] }
			if shared {
				o.Shared = q
			}
			return o
		}
		a := mk()
		b := a // the worker long-polls the replica asked, or another
		if shared {
			b = mk()
		}
		ctx := t.Context()
		for _, worker := range []string{"w-dead", "w-alive"} {
			taken := make(chan string, 1)
			go func() {
				op, err := b.NextFor(ctx, worker, "h1")
				if err != nil {
					t.Errorf("NextFor(%s): %v", worker, err)
					return
				}
				taken <- op.ID // and never answers
			}()
			rctx, cancel := context.WithTimeout(ctx, 4*LostCheck)
			_, err := a.Do(rctx, Op{Workspace: Workspace{ID: "ws_1", Host: "h1"}})
			cancel()
			<-taken
			if worker == "w-dead" && (!errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "worker w-dead, which took the operation, stopped reporting")) {
				t.Errorf("shared=%v: Do taken by a lost worker = %v, want unavailable naming it", shared, err)
			}
			if worker == "w-alive" && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("shared=%v: Do taken by a live worker = %v, want it to wait (until its context ends)", shared, err)
			}
		}
	}
}
