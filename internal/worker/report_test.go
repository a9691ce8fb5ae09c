package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/helmr/helmr/internal/errdefs"
)

// TestReportRetries: an outcome report that fails because the control
// plane is away (a replica or its database restarting) is sent again
// until it lands; a refusal is not.
func TestReportRetries(t *testing.T) {
	w := &Worker{log: slog.New(slog.DiscardHandler)}
	calls := 0
	err := w.report(t.Context(), func(context.Context) error {
		calls++
		if calls < 3 {
			return fmt.Errorf("POST /v1/worker/runs/r/finish: 500 terminating connection due to administrator command")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("report through an outage = %v after %d calls, want nil after 3", err, calls)
	}
	calls = 0
	err = w.report(t.Context(), func(context.Context) error {
		calls++
		return fmt.Errorf("finish: %w", errdefs.ErrConflict)
	})
	if !errors.Is(err, errdefs.ErrConflict) || calls != 1 {
		t.Errorf("refused report = %v after %d calls, want the conflict after 1", err, calls)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls = 0
	if err := w.report(ctx, func(context.Context) error { calls++; return errors.New("connection refused") }); err == nil || calls != 1 {
		t.Errorf("report with its context over = %v after %d calls, want the error after 1", err, calls)
	}
}
