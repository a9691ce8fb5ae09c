package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workers"
)

// Flow control: retries, queues and concurrency, and run options
// (priority, delay, ttl, tags) in the manner of Trigger.dev, with one
// difference that matters: a run parked at a waitpoint holds no queue
// slot (its sandbox is saved and gone).

// RetryPolicy is a task's retry policy (see deployments.RetryPolicy).
type RetryPolicy = deployments.RetryPolicy

// retries reports whether a run that ended with status and e is tried
// again under p (attempts left aside): see RetryPolicy.
func retries(p RetryPolicy, status Status, e *Error) bool {
	if e == nil || e.NoRetry {
		return false
	}
	switch {
	case status == StatusTimedOut:
		return p.OnTimeout
	case status != StatusFailed:
		return false
	}
	switch e.Class {
	case ClassTaskProcess, ClassGuestRuntime:
		return true
	}
	return false
}

// Attempt is one failed attempt of a run that was tried again.
type Attempt struct {
	Attempt    int        `json:"attempt"`
	Status     Status     `json:"status"`
	Error      *Error     `json:"error,omitempty"`
	WorkerID   string     `json:"workerId,omitempty"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt time.Time  `json:"finishedAt"`
}

// Retry is a transition's move of a failed attempt back to the queue.
type Retry struct {
	Failed Attempt
	At     time.Time // not leased before
}

// Queue is a named queue of a project environment: its runs take at
// most ConcurrencyLimit slots at once (0: no limit; with a concurrency
// key, per key), and a paused queue starts none.
type Queue struct {
	Project          string `json:"project"`
	Env              string `json:"env"`
	Name             string `json:"name"`
	ConcurrencyLimit int    `json:"concurrencyLimit"`
	Paused           bool   `json:"paused"`
	Running          int    `json:"running"`
	Queued           int    `json:"queued"`
}

// Limits bound tags and priorities.
const (
	MaxTags      = 10
	MaxTagLength = 128
	MaxPriority  = 1000
)

// ValidQueueName reports whether n may name a queue, a concurrency key
// or a tag.
func ValidQueueName(n string) bool { return deployments.ValidQueueName(n) }

// TaskQueue is the queue a task's runs go to when it declares none.
func TaskQueue(taskID string) string { return "task/" + taskID }

// ValidateTags reports tags a run may not carry.
func ValidateTags(tags []string) error {
	if len(tags) > MaxTags {
		return fmt.Errorf("a run carries at most %d tags, got %d", MaxTags, len(tags))
	}
	seen := map[string]bool{}
	for _, t := range tags {
		if t == "" || len(t) > MaxTagLength || !ValidQueueName(t) {
			return fmt.Errorf("tag %q: 1 to %d letters, digits and _.:/- (starting with a letter or digit)", t, MaxTagLength)
		}
		if seen[t] {
			return fmt.Errorf("tag %q given twice", t)
		}
		seen[t] = true
	}
	return nil
}

// options are a run's flow-control fields, worked out at trigger.
type options struct {
	Queue, ConcurrencyKey   string
	Priority                int
	Tags                    []string
	AvailableAt, ExpiresAt  *time.Time
	IdempotencyKeyExpiresAt *time.Time
	Retry                   *RetryPolicy
}

// Bounds of the time options.
const (
	MaxDelay = 365 * 24 * time.Hour
	MaxTTL   = 365 * 24 * time.Hour
)

// runOptions checks req's run options against task and works out the
// run's queue, times and retry policy.
func runOptions(req TriggerRequest, task deployments.Task, now time.Time) (options, error) {
	o := options{Queue: TaskQueue(req.TaskID), ConcurrencyKey: req.ConcurrencyKey, Priority: req.Priority, Tags: req.Tags, Retry: task.Spec.Retry}
	if q := task.Spec.Queue; q != nil {
		o.Queue = q.Name
	}
	if req.Queue != "" {
		if !ValidQueueName(req.Queue) {
			return o, fmt.Errorf("queue %q: 1 to 128 letters, digits and _.:/- (starting with a letter or digit)", req.Queue)
		}
		o.Queue = req.Queue
	}
	if req.ConcurrencyKey != "" && !ValidQueueName(req.ConcurrencyKey) {
		return o, fmt.Errorf("concurrencyKey %q: 1 to 128 letters, digits and _.:/- (starting with a letter or digit)", req.ConcurrencyKey)
	}
	if req.Priority < -MaxPriority || req.Priority > MaxPriority {
		return o, fmt.Errorf("priority is -%d to %d, got %d", MaxPriority, MaxPriority, req.Priority)
	}
	if err := ValidateTags(req.Tags); err != nil {
		return o, err
	}
	switch {
	case req.Delay < 0 || req.Delay > MaxDelay:
		return o, fmt.Errorf("delay is 0 to %s, got %s", MaxDelay, req.Delay)
	case !req.StartAt.IsZero() && req.Delay > 0:
		return o, fmt.Errorf("give a delay or a time to start at, not both")
	case !req.StartAt.IsZero() && req.StartAt.After(now.Add(MaxDelay)):
		return o, fmt.Errorf("a run starts within %s, not at %s", MaxDelay, req.StartAt.Format(time.RFC3339))
	case req.TTL < 0 || req.TTL > MaxTTL:
		return o, fmt.Errorf("ttl is 0 to %s, got %s", MaxTTL, req.TTL)
	case req.IdempotencyKeyTTL < 0 || req.IdempotencyKeyTTL > MaxTTL:
		return o, fmt.Errorf("idempotencyKeyTTL is 0 to %s, got %s", MaxTTL, req.IdempotencyKeyTTL)
	case req.IdempotencyKeyTTL > 0 && req.IdempotencyKey == "":
		return o, fmt.Errorf("idempotencyKeyTTL needs an idempotency key")
	}
	start := now
	if req.Delay > 0 {
		start = now.Add(req.Delay)
		o.AvailableAt = &start
	} else if !req.StartAt.IsZero() && req.StartAt.After(now) {
		start = req.StartAt.UTC()
		o.AvailableAt = &start
	}
	if req.TTL > 0 {
		// A delayed run's ttl counts from when it may start.
		exp := start.Add(req.TTL)
		o.ExpiresAt = &exp
	}
	if req.IdempotencyKeyTTL > 0 {
		exp := now.Add(req.IdempotencyKeyTTL)
		o.IdempotencyKeyExpiresAt = &exp
	}
	return o, nil
}

// retry queues the next attempt of run id, which ended as o, when its
// policy says so; ok reports that it did (and r is the queued run).
func (s *Service) retry(ctx context.Context, id string, o Outcome, now time.Time) (r Run, ok bool, err error) {
	cur, err := s.store.GetRun(ctx, id)
	if err != nil || cur.Retry == nil || !retries(*cur.Retry, o.Status, o.Error) {
		return Run{}, false, nil
	}
	if h := o.held(); h != nil && (cur.WorkerID != h.WorkerID || max(cur.Attempt, 1) != max(h.Attempt, 1)) {
		return Run{}, false, nil // the transition below refuses it, naming why
	}
	attempt := max(cur.Attempt, 1)
	if attempt >= cur.Retry.MaxAttempts {
		if cur.Retry.MaxAttempts > 1 {
			_ = s.Note(ctx, id, SystemData{Message: fmt.Sprintf("attempt %d of %d failed: no attempts left", attempt, cur.Retry.MaxAttempts),
				Attrs: map[string]string{"attempt": fmt.Sprint(attempt), "maxAttempts": fmt.Sprint(cur.Retry.MaxAttempts)}})
		}
		return Run{}, false, nil
	}
	delay := cur.Retry.Delay(attempt + 1)
	msg := ""
	if o.Error != nil {
		msg = fmt.Sprintf(" (%s: %s)", o.Error.Class, o.Error.Message)
	}
	// A run whose worker was lost after it was restored from a
	// checkpoint is restored from it again: its memory when it parked.
	// Any other retry starts afresh, so its lease must carry no
	// checkpoint.
	from := "from a fresh sandbox"
	if cur.WorkspaceID != "" {
		from += " on its workspace"
	}
	attrs := map[string]string{"attempt": fmt.Sprint(attempt), "nextAttempt": fmt.Sprint(attempt + 1),
		"maxAttempts": fmt.Sprint(cur.Retry.MaxAttempts), "retryInMs": fmt.Sprint(delay.Milliseconds())}
	if ck := s.lastCheckpoint(ctx, id); ck != nil && o.lost {
		from = fmt.Sprintf("restoring checkpoint %s, the run's memory and workspace when it parked on waitpoint %s (what it did after that restore is done again)", ck.ID, ck.WaitpointID)
		attrs["checkpoint"] = ck.ID
	} else if ck != nil && s.DropCheckpoints != nil {
		s.DropCheckpoints(ctx, id)
	}
	if err := s.Note(ctx, id, SystemData{
		Message: fmt.Sprintf("attempt %d of %d failed%s; attempt %d starts in %s, %s",
			attempt, cur.Retry.MaxAttempts, msg, attempt+1, delay.Round(time.Millisecond), from),
		Attrs: attrs,
	}); err != nil {
		return Run{}, false, err
	}
	r, _, err = s.store.Transition(ctx, id, Transition{
		From: []Status{StatusStarting, StatusRunning, StatusWaiting}, To: StatusQueued, Time: now,
		Retry: &Retry{At: now.Add(delay), Failed: Attempt{Attempt: attempt, Status: o.Status, Error: o.Error,
			WorkerID: cur.WorkerID, StartedAt: cur.StartedAt, FinishedAt: now}},
		Held: o.held(),
	})
	if err != nil {
		return Run{}, false, err
	}
	if s.Retried != nil {
		s.Retried(context.WithoutCancel(ctx), r)
	}
	s.broker.Publish(id)
	s.broker.PublishQueue()
	return r, true, nil
}

// ExpireRuns ends the queued runs whose ttl ran out (EXPIRED).
func (s *Service) ExpireRuns(ctx context.Context) (int, error) {
	rs, err := s.store.ExpireRuns(ctx, s.now())
	for _, r := range rs {
		s.broker.Publish(r.ID)
		s.ended(ctx, r)
	}
	return len(rs), err
}

// DeclareQueues records the queues a deployment's tasks declare, with
// their limits.
func (s *Service) DeclareQueues(ctx context.Context, project, env string, tasks []deployments.TaskManifest) error {
	for _, t := range tasks {
		if q := t.Queue; q != nil {
			if err := s.store.DeclareQueue(ctx, Queue{Project: project, Env: env, Name: q.Name, ConcurrencyLimit: q.ConcurrencyLimit}); err != nil {
				return err
			}
		}
	}
	s.broker.PublishQueue()
	return nil
}

// Queues lists the queues of a project environment.
func (s *Service) Queues(ctx context.Context, project, env string) ([]Queue, error) {
	qs, err := s.store.ListQueues(ctx, project, env)
	if qs == nil {
		qs = []Queue{}
	}
	return qs, err
}

// GetQueue returns one queue with its counts. A queue is a name: one
// that no deployment declares and no run waits in is empty, with no
// limit.
func (s *Service) GetQueue(ctx context.Context, project, env, name string) (Queue, error) {
	if !ValidQueueName(name) {
		return Queue{}, fmt.Errorf("queue %q: 1 to 128 letters, digits and _.:/-: %w", name, errdefs.ErrInvalid)
	}
	q, err := s.store.GetQueue(ctx, project, env, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return Queue{Project: project, Env: env, Name: name}, nil
	}
	return q, err
}

// PauseQueue pauses (or resumes) a queue: a paused queue starts no run;
// runs already started go on.
func (s *Service) PauseQueue(ctx context.Context, project, env, name string, paused bool) (Queue, error) {
	if !ValidQueueName(name) {
		return Queue{}, fmt.Errorf("queue %q: 1 to 128 letters, digits and _.:/-: %w", name, errdefs.ErrInvalid)
	}
	q, err := s.store.PauseQueue(ctx, project, env, name, paused)
	if err == nil && !paused {
		s.broker.PublishQueue()
	}
	return q, err
}

// WatchTimes, every interval until ctx ends, ends the runs whose ttl ran
// out and wakes waiting workers when a delayed run or a retry becomes
// due.
func (s *Service) WatchTimes(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	last := s.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.now()
		if n, err := s.ExpireRuns(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("expire runs", "err", err)
		} else if n > 0 {
			s.log.Info("runs expired before they started", "runs", n)
		}
		if due, err := s.store.BecameDue(ctx, last.Add(-interval), now); err == nil && due {
			s.broker.PublishQueue()
		}
		last = now
	}
}

// machine applies a run's machine override to needs (the task's
// declared resources): at most what the sandbox declares, since the
// declaration is what the operator and the image were sized for.
func machine(req TriggerRequest, needs *workers.Need) error {
	if req.MachineCPU != 0 {
		switch {
		case req.MachineCPU < 0.01 || req.MachineCPU > 256:
			return fmt.Errorf("machine.cpu is 0.01 to 256 vCPUs, got %g", req.MachineCPU)
		case needs.CPU > 0 && req.MachineCPU > needs.CPU:
			return fmt.Errorf("machine.cpu %g is more than the %g vCPUs the task's sandbox declares", req.MachineCPU, needs.CPU)
		}
		needs.CPU = req.MachineCPU
	}
	if req.MachineMemory != "" {
		m, err := deployments.ParseMemory(req.MachineMemory)
		if err != nil {
			return fmt.Errorf("machine.memory: %v", err)
		}
		if needs.MemoryBytes > 0 && m > needs.MemoryBytes {
			return fmt.Errorf("machine.memory %s is more than the task's sandbox declares (%s)", req.MachineMemory, deployments.FormatSize(needs.MemoryBytes))
		}
		needs.MemoryBytes = m
	}
	return nil
}
