package deployments

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"time"
)

// RetryPolicy says how often and how soon a failed run is tried again.
// An attempt that fails with a retryable class (task_process,
// guest_runtime: the task threw, or its worker was lost) is queued again,
// from a fresh sandbox on the same workspace, after
// min(MaxTimeoutMs, MinTimeoutMs * Factor^(attempt-1)), scaled by a random
// factor in [1, 2) when Randomize is set. deployment_build,
// image_preparation, parked_wait and cancellation never retry; a timeout
// retries only with OnTimeout. A task that throws AbortTaskRunError fails
// at once (Error.NoRetry).
type RetryPolicy struct {
	MaxAttempts  int     `json:"maxAttempts"`
	Factor       float64 `json:"factor,omitempty"`
	MinTimeoutMs int64   `json:"minTimeoutInMs,omitempty"`
	MaxTimeoutMs int64   `json:"maxTimeoutInMs,omitempty"`
	Randomize    bool    `json:"randomize,omitempty"`
	// OnTimeout retries a run that ran past its maxDuration too.
	OnTimeout bool `json:"retryOnTimeout,omitempty"`
}

// MaxAttempts bounds RetryPolicy.MaxAttempts.
const MaxAttempts = 100

// Validate reports a policy no run could use.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxAttempts < 1 || p.MaxAttempts > MaxAttempts:
		return fmt.Errorf("retry.maxAttempts is 1 to %d, got %d", MaxAttempts, p.MaxAttempts)
	case p.Factor != 0 && (p.Factor < 1 || p.Factor > 10):
		return fmt.Errorf("retry.factor is 1 to 10, got %g", p.Factor)
	case p.MinTimeoutMs < 0 || p.MaxTimeoutMs < 0:
		return fmt.Errorf("retry timeouts are not negative")
	case p.MaxTimeoutMs > 0 && p.MinTimeoutMs > p.MaxTimeoutMs:
		return fmt.Errorf("retry.minTimeoutInMs (%d) is above retry.maxTimeoutInMs (%d)", p.MinTimeoutMs, p.MaxTimeoutMs)
	case p.MaxTimeoutMs > int64(24*time.Hour/time.Millisecond):
		return fmt.Errorf("retry.maxTimeoutInMs is at most a day")
	}
	return nil
}

// Defaults of a RetryPolicy's zero fields.
const (
	DefaultRetryFactor     = 2
	DefaultRetryMinTimeout = 1000
	DefaultRetryMaxTimeout = 60000
)

// Delay is how long to wait before attempt next (2 or more).
func (p RetryPolicy) Delay(next int) time.Duration {
	factor, lo, hi := p.Factor, p.MinTimeoutMs, p.MaxTimeoutMs
	if factor == 0 {
		factor = DefaultRetryFactor
	}
	if lo == 0 {
		lo = DefaultRetryMinTimeout
	}
	if hi == 0 {
		hi = max(lo, DefaultRetryMaxTimeout)
	}
	ms := float64(lo) * math.Pow(factor, float64(next-2))
	if p.Randomize {
		ms *= 1 + rand.Float64()
	}
	ms = math.Min(ms, float64(hi))
	return time.Duration(ms) * time.Millisecond
}

// QueueManifest is the queue a task's runs wait in: a name shared by the
// tasks that declare it, and at most ConcurrencyLimit of its runs started
// at once (0: no limit; per concurrency key when runs have one).
type QueueManifest struct {
	Name             string `json:"name"`
	ConcurrencyLimit int    `json:"concurrencyLimit,omitempty"`
}

// MaxConcurrencyLimit bounds a queue's limit.
const MaxConcurrencyLimit = 100000

var queueNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$`)

// ValidQueueName reports whether n may name a queue, a concurrency key
// or a tag.
func ValidQueueName(n string) bool { return queueNamePattern.MatchString(n) }
