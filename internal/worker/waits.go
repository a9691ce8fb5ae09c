package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/agent/channel"
	"github.com/helmr/helmr/internal/waitpoints"
)

// runWaits serves one run's wait requests and keeps its maxDuration clock:
// the clock stops while the run waits (time spent WAITING does not count
// against maxDuration; a wait is bounded by its own timeout instead).
type runWaits struct {
	w     *Worker
	runID string
	send  func(msg []byte) error
	wg    sync.WaitGroup

	mu      sync.Mutex
	sendMu  sync.Mutex
	left    time.Duration // of maxDuration, when the clock is stopped
	since   time.Time     // when the clock last started
	timer   *time.Timer   // fires at the end of maxDuration while running
	expired bool
	waits   int // waits in progress
	fire    func()

	// park, if set, takes a request to park the run (see park.go);
	// parkTried is set once a wait of the run tried.
	park      chan *parkRequest
	parkTried bool
}

func newRunWaits(w *Worker, runID string, maxDur time.Duration, fire func()) *runWaits {
	rw := &runWaits{w: w, runID: runID, left: maxDur, since: time.Now(), fire: fire}
	rw.timer = time.AfterFunc(maxDur, rw.expire)
	return rw
}

func (rw *runWaits) expire() {
	rw.mu.Lock()
	rw.expired = true
	rw.mu.Unlock()
	rw.fire()
}

// stop ends the maxDuration clock and waits for the requests in flight
// (their context must have ended).
func (rw *runWaits) stop() {
	rw.mu.Lock()
	rw.timer.Stop()
	rw.mu.Unlock()
	rw.wg.Wait()
}

// remaining is what is left of maxDuration while the run waits.
func (rw *runWaits) remaining() time.Duration {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.left
}

// begin counts a wait; the first stops the clock.
func (rw *runWaits) begin() {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.waits++
	if rw.waits == 1 && rw.timer.Stop() {
		rw.left -= time.Since(rw.since)
	}
}

// end counts a wait done; the last restarts the clock and reports true.
func (rw *runWaits) end() bool {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.waits--
	if rw.waits > 0 {
		return false
	}
	if !rw.expired {
		rw.since = time.Now()
		rw.timer = time.AfterFunc(max(rw.left, 0), rw.expire)
	}
	return true
}

// handle answers a request (ctx.wait.*, ctx.session.*, ctx.metadata.*, tasks.*)
// in the background, with a response of the same id.
func (rw *runWaits) handle(ctx context.Context, msg []byte) {
	var req channel.Request
	if err := json.Unmarshal(msg, &req); err != nil {
		rw.w.log.Warn("malformed request from the adapter", "run_id", rw.runID, "err", err)
		return
	}
	rw.wg.Add(1)
	go func() {
		defer rw.wg.Done()
		result, err := rw.serve(ctx, req)
		if ctx.Err() != nil || errors.Is(err, errParked) {
			return // the run is ending or parked: nobody reads the answer here
		}
		b, err := channel.Answer(req.ID, result, err)
		if err != nil {
			rw.w.log.Error("answer the adapter", "run_id", rw.runID, "method", req.Method, "err", err)
			return
		}
		rw.sendMu.Lock()
		defer rw.sendMu.Unlock()
		if err := rw.send(b); err != nil {
			rw.w.log.Warn("answer the adapter", "run_id", rw.runID, "method", req.Method, "err", err)
		}
	}()
}

// serve answers one request; every method of channel.Methods has a case.
func (rw *runWaits) serve(ctx context.Context, req channel.Request) (any, error) {
	cp := rw.w.cfg.Control
	switch req.Method {
	case channel.MethodWaitCreateToken:
		var p channel.CreateTokenParams
		if err := params(req, &p); err != nil {
			return nil, err
		}
		wp, err := cp.CreateWaitpoint(ctx, rw.runID, waitpoints.CreateRequest{Kind: waitpoints.KindToken,
			TimeoutSeconds: p.TimeoutSeconds, IdempotencyKey: p.IdempotencyKey, Tags: p.Tags})
		if err != nil {
			return nil, err
		}
		return channel.TokenResult{ID: wp.ID, URL: wp.CallbackURL}, nil
	case channel.MethodWaitHuman:
		var p channel.WaitHumanParams
		if err := params(req, &p); err != nil {
			return nil, err
		}
		wp, err := cp.CreateWaitpoint(ctx, rw.runID, waitpoints.CreateRequest{Kind: waitpoints.KindHuman,
			DisplayText: p.DisplayText, Schema: p.Schema, TimeoutSeconds: p.TimeoutSeconds})
		if err != nil {
			return nil, err
		}
		return rw.wait(ctx, wp.ID, 0, req.ID)
	case channel.MethodWaitForToken:
		var p channel.ForTokenParams
		if err := params(req, &p); err != nil {
			return nil, err
		}
		if p.Token == "" {
			return nil, errors.New("wait.forToken: a token id is required")
		}
		return rw.wait(ctx, p.Token, time.Duration(p.TimeoutSeconds*float64(time.Second)), req.ID)
	case channel.MethodWaitFor:
		var p channel.WaitForParams
		if err := params(req, &p); err != nil {
			return nil, err
		}
		if p.Seconds <= 0 {
			return nil, nil // nothing to wait for
		}
		return nil, rw.waitTimer(ctx, req.ID, waitpoints.CreateRequest{Kind: waitpoints.KindTimer, TimeoutSeconds: p.Seconds})
	case channel.MethodWaitUntil:
		var p channel.WaitUntilParams
		if err := params(req, &p); err != nil || p.Until == "" {
			return nil, err // no time: it has come
		}
		until, err := p.Time()
		if err != nil {
			return nil, err
		}
		if !until.After(time.Now()) {
			return nil, nil // the time has come
		}
		return nil, rw.waitTimer(ctx, req.ID, waitpoints.CreateRequest{Kind: waitpoints.KindTimer, FireAt: &until})
	case channel.MethodSessionInputNext, channel.MethodSessionOutputAppend, channel.MethodMetadataSet:
		return rw.serveSession(ctx, req)
	case channel.MethodTasksTrigger, channel.MethodTasksTriggerAndWait:
		return rw.serveTasks(ctx, req)
	}
	return nil, fmt.Errorf("unknown request %q", req.Method)
}

// params decodes a request's params into p (none: p stays zero).
func params(req channel.Request, p any) error {
	if len(req.Params) == 0 {
		return nil
	}
	if err := json.Unmarshal(req.Params, p); err != nil {
		return fmt.Errorf("%s: malformed params: %v", req.Method, err)
	}
	return nil
}

// waitTimer makes the run wait on a new timer (a request of wait.for or
// wait.until).
func (rw *runWaits) waitTimer(ctx context.Context, reqID int64, creq waitpoints.CreateRequest) error {
	wp, err := rw.w.cfg.Control.CreateWaitpoint(ctx, rw.runID, creq)
	if err != nil {
		return err
	}
	_, err = rw.wait(ctx, wp.ID, 0, reqID)
	return err
}

// wait makes the run wait on waitpoint id until it resolves (or, if
// limit > 0, until limit passes: a timed-out result that leaves the token
// waiting), then resumes the run and returns the task's result. A wait of
// the worker's ParkAfter or more parks the run (errParked: the adapter's
// request reqID is answered by the worker that restores it).
func (rw *runWaits) wait(ctx context.Context, id string, limit time.Duration, reqID int64) (waitpoints.Result, error) {
	cp := rw.w.cfg.Control
	rw.begin()
	ended := false
	end := func() error {
		if ended {
			return nil
		}
		ended = true
		if rw.end() {
			return cp.EndWait(ctx, rw.runID, id)
		}
		return nil
	}
	defer end()
	wp, err := cp.BeginWait(ctx, rw.runID, id)
	if err != nil {
		return waitpoints.Result{}, err
	}
	var deadline, parkAt time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	if rw.w.cfg.ParkAfter > 0 && !rw.tried() {
		parkAt = time.Now().Add(rw.w.cfg.ParkAfter)
	}
	backoff := 100 * time.Millisecond
	for wp.Status == waitpoints.StatusWaiting {
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			if err := end(); err != nil {
				return waitpoints.Result{}, err
			}
			return waitpoints.Result{TimedOut: true}, nil
		}
		if !parkAt.IsZero() && !time.Now().Before(parkAt) {
			parkAt = time.Time{}
			if rw.tryPark(ctx, id, reqID) {
				ended = true // the restoring worker resumes the run
				return waitpoints.Result{}, errParked
			}
		}
		until := deadline
		if !parkAt.IsZero() && (until.IsZero() || parkAt.Before(until)) {
			until = parkAt
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if !until.IsZero() {
			actx, cancel = context.WithDeadline(ctx, until)
		}
		next, err := cp.AwaitWaitpoint(actx, rw.runID, id)
		cancel()
		switch {
		case ctx.Err() != nil:
			return waitpoints.Result{}, ctx.Err()
		case err != nil && actx.Err() == nil:
			rw.w.log.Warn("await waitpoint", "run_id", rw.runID, "waitpoint", id, "err", err)
			select {
			case <-ctx.Done():
				return waitpoints.Result{}, ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		case err == nil:
			wp, backoff = next, 100*time.Millisecond
		}
	}
	if err := end(); err != nil {
		return waitpoints.Result{}, err
	}
	return waitpoints.ResultOf(wp), nil
}
