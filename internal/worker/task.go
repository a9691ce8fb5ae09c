package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/agent/channel"
	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox"
)

// runTask starts the task in the booted sandbox's adapter and waits for it
// under the run's maxDuration, watching for cancellation; nil means
// canceled.
//
// With resume set, the sandbox was restored from that checkpoint: the task
// runs already, and its pending wait request is answered with the wait's
// result instead of a start message.
func (w *Worker) runTask(ctx context.Context, l Lease, b *booted, p prepared, sec runSecrets, resume *checkpoints.Checkpoint) *runs.Outcome {
	maxDur := time.Duration(l.Run.MaxDurationSec) * time.Second
	if maxDur <= 0 {
		maxDur = runs.DefaultMaxDuration * time.Second
	}
	if resume != nil && b.maxLeft > 0 {
		maxDur = b.maxLeft // what the run had left when it was parked
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// maxDuration counts the time the run is RUNNING: waits stop its clock.
	waits := newRunWaits(w, l.Run.ID, maxDur, func() { cancel(errTimedOut) })
	waits.send = b.sender.Send
	if w.canPark() {
		waits.park = make(chan *parkRequest)
	}
	defer func() {
		cancel(nil)
		waits.stop()
	}()
	defer w.watchCancel(ctx, l.Run.ID, cancel)()

	// The run's egress-bound credentials work in the sandbox's network
	// stack while the run holds it.
	b.creds = sec.creds
	defer b.trust.add(sec.creds)()
	logs := newLogSink(w.cfg.Control, l.Run.ID, w.log)
	logs.redact = sec.redact
	defer logs.Close()
	var mu sync.Mutex
	var result *report
	reported := make(chan struct{})
	b.attach(logs.Write, func(msg []byte) {
		var m channel.Envelope
		mu.Lock()
		defer mu.Unlock()
		if json.Unmarshal(msg, &m) != nil {
			return
		}
		if m.Type == channel.TypeRequest {
			waits.handle(ctx, msg)
			return
		}
		if result == nil {
			if result = readReport(m.Type, msg); result != nil {
				close(reported)
			}
		}
	})
	start, _ := json.Marshal(channel.Start{
		Type: channel.TypeStart, Module: "/opt/helmr/task/" + l.Task.Module, Export: l.Task.Export,
		Payload: l.Run.Payload, Run: channel.RunInfo{ID: l.Run.ID, TaskID: l.Run.TaskID},
		Env: startEnv(l, sec),
	})
	if resume != nil {
		if err := waits.answer(ctx, resume); err != nil {
			return failed(runs.ClassParkedWait, "answer the restored task's wait: %v", err)
		}
	} else {
		for _, f := range sec.files {
			if err := b.box.WriteFile(ctx, f.file); err != nil {
				return failed(runs.ClassImagePreparation, "secret %s: place %s: %v", f.name, f.file.Path, err)
			}
		}
		if err := b.sender.Send(start); err != nil {
			return failed(runs.ClassGuestRuntime, "send the start message to the adapter: %v", err)
		}
	}
	for {
		pr := w.awaitExit(ctx, b, reported, waits.park)
		if pr == nil {
			break
		}
		err := w.park(ctx, l, b, p, pr, waits.remaining())
		pr.done <- err
		if err == nil {
			return nil // parked: the run is WAITING, held by no worker
		}
		if errors.Is(err, errSandboxGone) {
			return failed(runs.ClassParkedWait, "park the waiting run: %v", err)
		}
		w.log.Warn("run not parked, its sandbox stays up", "run_id", l.Run.ID, "err", err)
	}
	logs.Close()
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errCanceled):
		return nil
	case errors.Is(cause, errTimedOut):
		return &runs.Outcome{Status: runs.StatusTimedOut, Error: &runs.Error{Class: runs.ClassTimeout,
			Message: fmt.Sprintf("the run exceeded its maxDuration of %s and was stopped", maxDur)}}
	case ctx.Err() != nil:
		return failed(runs.ClassGuestRuntime, "the worker shut down while the run was in progress")
	}
	mu.Lock()
	res := result
	mu.Unlock()
	if b.alive() {
		// The adapter reported but its exit has not arrived within the
		// grace: the outcome is the report; destroying the sandbox ends
		// whatever the task left behind.
		o := w.outcome(l, b.box, sandbox.ExitStatus{}, res, logs.Tail())
		o.Notes = append(o.Notes, b.sandboxNotes()...)
		return o
	}
	if b.xerr != nil && !b.box.Stats().OOMKilled {
		// (A tier that kills the whole sandbox at its memory limit ends the
		// agent too; outcome reports that as the memory limit.)
		return failed(runs.ClassGuestRuntime, "guest agent: %v", b.xerr)
	}
	o := w.outcome(l, b.box, b.exit, res, logs.Tail())
	o.Notes = append(o.Notes, b.sandboxNotes()...)
	if b.box.Stats().PidsLimitHit {
		o.Notes = append(o.Notes, runs.SystemData{Message: "the sandbox hit its process limit: forks were refused",
			Attrs: map[string]string{"limit": "pids"}})
	}
	return o
}

func (w *Worker) outcome(l Lease, box sandbox.Sandbox, exit sandbox.ExitStatus, rep *report, tail []string) *runs.Outcome {
	st := box.Stats()
	if st.OOMKilled {
		return failed(runs.ClassTaskProcess, "the task was killed for exceeding its memory limit of %s", orDefault(l.Task.Sandbox.Resources.Memory, "the worker default"))
	}
	if rep != nil && rep.result != nil {
		out := rep.result.Output
		if len(out) == 0 {
			out = json.RawMessage("null")
		}
		return &runs.Outcome{Status: runs.StatusCompleted, Output: out}
	}
	if rep != nil {
		f := rep.failure
		msg := f.Message
		if f.Name != "" && f.Name != "Error" && !strings.HasPrefix(msg, f.Name) {
			msg = f.Name + ": " + msg
		}
		o := failed(runs.ClassTaskProcess, "%s", msg)
		o.Error.Stack, o.Error.Name = f.Stack, f.Name
		// The task asked to fail without retrying, or its input validator
		// refused the payload (it would refuse it again).
		o.Error.NoRetry = f.Name == "AbortTaskRunError" || f.Name == "TaskInputError"
		return o
	}
	how := fmt.Sprintf("exited with code %d", exit.Code)
	if exit.Signal != "" {
		how = "was killed by signal " + exit.Signal
	}
	if st.PidsLimitHit {
		how += " after hitting the sandbox's process limit"
	}
	o := failed(runs.ClassTaskProcess, "the task process %s before reporting a result", how)
	if len(tail) > 0 {
		o.Error.Stack = strings.Join(tail, "\n")
	}
	return o
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// watchCancel polls the run's status on a goroutine of its own and calls
// cancel once the run was canceled from outside. It returns the function
// that stops the poll and waits for it (defer it: a run's watcher never
// outlives the run).
func (w *Worker) watchCancel(ctx context.Context, runID string, cancel context.CancelCauseFunc) (stop func()) {
	ctx, stopCtx := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.pollCanceled(ctx, runID, cancel)
	}()
	return func() {
		stopCtx()
		<-done
	}
}

func (w *Worker) pollCanceled(ctx context.Context, runID string, cancel context.CancelCauseFunc) {
	t := time.NewTicker(w.cfg.CancelPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := w.cfg.Control.Status(ctx, runID)
		if err == nil && st == runs.StatusCanceled {
			cancel(errCanceled)
			return
		}
	}
}

// exitGrace is how long the worker waits, after the adapter reported the
// run's result, for the adapter's exit. A task that left hundreds of
// processes behind can make that exit slow to arrive (each must be torn
// down); the report is what counts, and destroying the sandbox ends the rest.
const exitGrace = 2 * time.Second

// awaitExit waits for the adapter to exit, or for exitGrace after the
// adapter reported, or for ctx to end (then it kills the adapter and waits
// up to exitGrace for the exit), or for a request to park the run, which
// it returns.
func (w *Worker) awaitExit(ctx context.Context, b *booted, reported <-chan struct{}, park <-chan *parkRequest) *parkRequest {
	var grace <-chan time.Time
	for {
		select {
		case <-b.done:
			return nil
		case pr := <-park:
			return pr
		case <-reported:
			reported, grace = nil, time.After(exitGrace)
		case <-grace:
			return nil
		case <-ctx.Done():
			// Kill the adapter; as above, don't wait long for the exit:
			// destroying the sandbox ends what is left.
			b.cancel(context.Cause(ctx))
			select {
			case <-b.done:
			case <-time.After(exitGrace):
			}
			return nil
		}
	}
}

// sandboxNotes are the run's events for the egress its sandbox was refused,
// and for a workspace that reached its quota.
func (b *booted) sandboxNotes() []runs.SystemData {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []runs.SystemData
	if b.disk != nil && b.disk.Full() { // a disk guest's: see quotaNote
		out = append(out, quotaReached(b.disk.Size))
	}
	for _, d := range b.denials {
		out = append(out, runs.SystemData{Message: "egress policy: " + d.String(),
			Attrs: map[string]string{"egress": "denied", "proto": d.Proto, "dest": d.Dest}})
	}
	for _, n := range b.notices {
		out = append(out, runs.SystemData{Message: "egress credentials: " + n.Message,
			Attrs: map[string]string{"egress": "credential", "kind": n.Kind, "secret": n.Secret, "host": n.Host}})
	}
	return out
}

// quotaReached is the run's event for a workspace of size bytes that
// reached its quota.
func quotaReached(size int64) runs.SystemData {
	return runs.SystemData{Message: fmt.Sprintf("the workspace reached its quota of %s: writes to it failed with ENOSPC (no space left on device)", deployments.FormatSize(size)),
		Attrs: map[string]string{"limit": "workspace", "quota": strconv.FormatInt(size, 10)}}
}

// startEnv is the environment the adapter adds for the task: the run's ids
// and its env-placed secrets.
func startEnv(l Lease, sec runSecrets) map[string]string {
	env := map[string]string{}
	for k, v := range sec.env {
		env[k] = v
	}
	env["HELMR_RUN_ID"], env["HELMR_TASK_ID"] = l.Run.ID, l.Run.TaskID
	env["HELMR_ATTEMPT"] = fmt.Sprint(max(l.Run.Attempt, 1))
	return env
}
