package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// testOpQueue checks the shared queue of direct operations: hosts, one
// taker per operation, results and output, and that a dropped operation
// takes nothing more.
func testOpQueue(t *testing.T, s Store) {
	ctx := t.Context()
	for _, q := range []struct{ id, host string }{{"op_a", "h1"}, {"op_b", ""}, {"op_c", "h2"}} {
		if err := s.QueueOp(ctx, q.id, q.host, []byte(`{"id":"`+q.id+`"}`), at(0).Add(time.Duration(len(q.id)+int(q.id[3]))*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	// h2 gets the any-host op_b first (queued before op_c), then op_c;
	// never h1's op_a.
	for _, want := range []string{"op_b", "op_c"} {
		id, op, err := s.TakeQueuedOp(ctx, "h2", "w2", at(1))
		if err != nil || id != want || string(op) != `{"id":"`+want+`"}` {
			t.Fatalf("TakeQueuedOp(h2) = %s %s %v, want %s", id, op, err, want)
		}
	}
	if id, _, err := s.TakeQueuedOp(ctx, "h2", "w2", at(1)); !errors.Is(err, workspaces.ErrNoOp) {
		t.Errorf("TakeQueuedOp(h2) once all are taken = %s %v, want ErrNoOp", id, err)
	}
	if ok, err := s.ClaimQueuedOp(ctx, "op_b", "w1", at(2)); ok || err != nil {
		t.Errorf("ClaimQueuedOp(taken) = %v %v, want false", ok, err)
	}
	if ok, err := s.ClaimQueuedOp(ctx, "op_a", "w1", at(2)); !ok || err != nil {
		t.Errorf("ClaimQueuedOp(op_a) = %v %v, want true", ok, err)
	}
	// Each says who took it.
	for id, want := range map[string]string{"op_a": "w1", "op_b": "w2", "op_c": "w2"} {
		if _, ok, by, err := s.QueuedResult(ctx, id); ok || err != nil || by != want {
			t.Errorf("QueuedResult(%s) before the result = %v, taken by %q, %v; want none yet, taken by %s", id, ok, by, err, want)
		}
	}
	for _, piece := range []string{"one", "two", "three"} {
		if err := s.AppendQueuedOutput(ctx, "op_b", []byte(piece)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.FinishQueuedOp(ctx, "op_b", []byte(`{"exec":{"exitCode":3}}`)); err != nil {
		t.Fatal(err)
	}
	res, ok, _, err := s.QueuedResult(ctx, "op_b")
	if !ok || err != nil || string(res) != `{"exec":{"exitCode":3}}` {
		t.Errorf("QueuedResult = %s %v %v", res, ok, err)
	}
	outs, err := s.QueuedOutputs(ctx, "op_b", 0)
	if err != nil || len(outs) != 3 || string(outs[0].Data) != "one" || string(outs[2].Data) != "three" {
		t.Fatalf("QueuedOutputs = %+v %v", outs, err)
	}
	if more, err := s.QueuedOutputs(ctx, "op_b", outs[1].Seq); err != nil || len(more) != 1 || string(more[0].Data) != "three" {
		t.Errorf("QueuedOutputs after the second = %+v %v", more, err)
	}

	if err := s.DropQueuedOp(ctx, "op_b"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "FinishQueuedOp(dropped)", s.FinishQueuedOp(ctx, "op_b", []byte(`{}`)), errdefs.ErrNotFound)
	wantErr(t, "AppendQueuedOutput(dropped)", s.AppendQueuedOutput(ctx, "op_b", []byte(`x`)), errdefs.ErrNotFound)
	_, _, _, err = s.QueuedResult(ctx, "op_b")
	wantErr(t, "QueuedResult(dropped)", err, errdefs.ErrNotFound)
	if outs, err := s.QueuedOutputs(ctx, "op_b", 0); err != nil || len(outs) != 0 {
		t.Errorf("QueuedOutputs(dropped) = %+v %v, want none", outs, err)
	}

	// A sweep removes what was queued before its time.
	if err := s.AppendQueuedOutput(ctx, "op_a", []byte("left")); err != nil {
		t.Fatal(err)
	}
	if err := s.SweepQueuedOps(ctx, at(0).Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"op_a", "op_c"} {
		_, _, _, err := s.QueuedResult(ctx, id)
		wantErr(t, "QueuedResult(swept "+id+")", err, errdefs.ErrNotFound)
	}
	if outs, _ := s.QueuedOutputs(ctx, "op_a", 0); len(outs) != 0 {
		t.Errorf("a swept operation's output is still there: %+v", outs)
	}
}

// testSharedOps runs two control plane replicas' operation queues on one
// store: an operation asked of replica A runs on a worker that long-polls
// replica B, with its credentials filled in by B and its streamed output
// and result coming back to A; one asked while a worker of A waits stays
// in A; a request that ends leaves nothing queued.
func testSharedOps(t *testing.T, s Store) { sharedOps(t, s, false) }

// testSharedOpsNotified is testSharedOps on a store that tells of its
// changes (workspaces.OpNotifier), with polling all but off (an hour):
// only the notices move the operations, and their results, along.
func testSharedOpsNotified(t *testing.T, s Store) {
	if _, ok := s.(workspaces.OpNotifier); !ok {
		return // this store has no notices (SQLite: one replica)
	}
	sharedOps(t, s, true)
}

func sharedOps(t *testing.T, s Store, notified bool) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a lost notice fails, not hangs
	defer cancel()
	poll, wait := 5*time.Millisecond, 300*time.Millisecond
	if notified {
		poll, wait = time.Hour, time.Hour
	}
	lctx, stopListening := context.WithCancel(ctx)
	var listeners sync.WaitGroup
	defer func() { stopListening(); listeners.Wait() }()
	replica := func(name string) *workspaces.Ops {
		o := workspaces.NewOps()
		o.Shared, o.Poll = s, poll
		if notified {
			listeners.Add(1)
			go func() { defer listeners.Done(); s.(workspaces.OpNotifier).ListenOps(lctx, o.Changed) }()
		}
		o.Resolve = func(_ context.Context, op workspaces.Op) (map[string]string, error) {
			if op.Workspace.Env != "dev" {
				return nil, errors.New("no such secret")
			}
			return map[string]string{"TOKEN": "value-from-" + name}, nil
		}
		return o
	}
	a, b := replica("a"), replica("b")
	// A worker of host h1 on replica B: it runs whatever it gets, printing
	// the credential it was given.
	var mu sync.Mutex
	var seen []workspaces.Op
	worker := func(ctx context.Context, o *workspaces.Ops) {
		for ctx.Err() == nil {
			wctx, cancel := context.WithTimeout(ctx, wait)
			op, err := o.Next(wctx, "h1")
			cancel()
			if err != nil {
				continue
			}
			mu.Lock()
			seen = append(seen, op)
			mu.Unlock()
			if op.Stream {
				for _, line := range []string{"first\n", "second\n"} {
					if err := o.Output(ctx, op.ID, workspaces.OpOutput{Stream: "stdout", Data: line}); err != nil {
						t.Errorf("Output: %v", err)
					}
				}
			}
			if err := o.Finish(ctx, op.ID, workspaces.OpResult{Exec: &workspaces.ExecResult{Stdout: op.Secrets["TOKEN"]}, Host: "h1"}); err != nil {
				t.Errorf("Finish: %v", err)
			}
		}
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); worker(wctx, b) }()
	defer func() { stop(); wg.Wait() }()

	ws := workspaces.Workspace{ID: "ws_1", Project: "p", Env: "dev", Host: "h1"}
	exec := &workspaces.ExecRequest{Command: "echo ${vault:TOKEN}"}
	var streamed []string
	res, err := a.DoStream(ctx, workspaces.Op{Workspace: ws, Exec: exec, Secrets: map[string]string{"TOKEN": "value-from-a"}}, func(stream string, data []byte) {
		streamed = append(streamed, stream+":"+string(data))
	})
	if err != nil || res.Exec == nil || res.Exec.Stdout != "value-from-b" || res.Host != "h1" {
		t.Fatalf("DoStream through replica B = %+v, %v; want B's worker's answer with B's credential", res, err)
	}
	if strings.Join(streamed, "") != "stdout:first\nstdout:second\n" {
		t.Errorf("streamed through the queue: %q", streamed)
	}
	// Nothing stays queued, and no credential value was stored.
	if rc, ok := s.(RowCounter); ok {
		for _, table := range []string{"op_queue", "op_queue_output"} {
			if n, err := rc.CountRows(ctx, table); err != nil || n != 0 {
				t.Errorf("%s holds %d rows (%v) after the operation, want none", table, n, err)
			}
		}
	}
	mu.Lock()
	if len(seen) != 1 || seen[0].Exec == nil || seen[0].Exec.Command != exec.Command {
		t.Errorf("B's worker saw %+v", seen)
	}
	mu.Unlock()

	// Credentials that cannot be filled in: the request gets an error
	// result, not a hang.
	res, err = a.Do(ctx, workspaces.Op{Workspace: workspaces.Workspace{ID: "ws_2", Project: "p", Env: "prod", Host: "h1"}, Exec: exec})
	if err != nil || !strings.Contains(res.Error, "credentials") {
		t.Errorf("Do with credentials B cannot fill in = %+v, %v; want an error result", res, err)
	}

	// A request that ends before any worker answers leaves nothing.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := a.Do(short, workspaces.Op{Workspace: workspaces.Workspace{ID: "ws_3", Host: "gone"}}); err == nil {
		t.Error("Do for a host no worker has succeeded")
	}
	if rc, ok := s.(RowCounter); ok {
		if n, _ := rc.CountRows(ctx, "op_queue"); n != 0 {
			t.Errorf("op_queue holds %d rows after the request ended", n)
		}
	}
	data, _ := json.Marshal(seen)
	if strings.Contains(string(data), "value-from-a") {
		t.Error("the credential value A held crossed the queue")
	}
}
