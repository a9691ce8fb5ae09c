package waitpoints

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

var _ runs.ChildWaits = (*Service)(nil)

// CreateChildWait implements runs.ChildWaits: a waitpoint of kind runs,
// of the parent run, that no API call completes (it may be canceled).
func (s *Service) CreateChildWait(ctx context.Context, parent runs.Run, key string, n int) (string, error) {
	text := "1 child run"
	if n != 1 {
		text = fmt.Sprintf("%d child runs", n)
	}
	w := Waitpoint{
		Project: parent.Project, Env: parent.Env, RunID: parent.ID, Kind: KindRuns, Status: StatusWaiting,
		DisplayText: text, Tags: []string{}, IdempotencyKey: key, CreatedAt: s.now(),
	}
	got, _, err := s.store.CreateWaitpoint(ctx, w)
	if err != nil {
		return "", fmt.Errorf("create waitpoint: %w", err)
	}
	return got.ID, nil
}

// CompleteChildWait implements runs.ChildWaits.
func (s *Service) CompleteChildWait(ctx context.Context, id string, data json.RawMessage) error {
	canon, err := canonical(data)
	if err != nil && !errors.Is(err, errdefs.ErrInvalid) {
		return err
	}
	if err != nil {
		canon = data // larger than a token's data may be: the runs' results as they are
	}
	_, err = s.resolve(ctx, id, Resolution{Status: StatusCompleted, Data: canon, Time: s.now()})
	if errors.Is(err, errdefs.ErrConflict) {
		if w, gerr := s.store.GetWaitpoint(ctx, id); gerr == nil && w.Status == StatusCanceled {
			return nil // canceled meanwhile (its run ended, say)
		}
	}
	return err
}
