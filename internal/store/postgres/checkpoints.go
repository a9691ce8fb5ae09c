package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/store"
)

var _ checkpoints.Store = (*Store)(nil)

const checkpointColumns = `id, run_id, waitpoint_id, exec_id, request_id, arch, tier, kernel, rootfs, size, created_at`

// CreateCheckpoint implements checkpoints.Store.
func (s *Store) CreateCheckpoint(ctx context.Context, c checkpoints.Checkpoint) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("create checkpoint: %w", err)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO checkpoints (`+checkpointColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		c.ID, c.RunID, c.WaitpointID, int64(c.ExecID), c.RequestID, c.Arch, c.Tier, c.Kernel, c.Rootfs, c.Size, store.Time(c.CreatedAt))
	if err != nil {
		return fmt.Errorf("create checkpoint %s: %w", c.ID, err)
	}
	return nil
}

func scanCheckpoint(sc scanner) (checkpoints.Checkpoint, error) {
	var c checkpoints.Checkpoint
	var exec int64
	if err := sc.Scan(&c.ID, &c.RunID, &c.WaitpointID, &exec, &c.RequestID, &c.Arch, &c.Tier, &c.Kernel, &c.Rootfs, &c.Size, &c.CreatedAt); err != nil {
		return c, err
	}
	c.ExecID = uint64(exec)
	c.CreatedAt = c.CreatedAt.UTC()
	return c, nil
}

// GetCheckpoint implements checkpoints.Store.
func (s *Store) GetCheckpoint(ctx context.Context, id string) (checkpoints.Checkpoint, error) {
	c, err := scanCheckpoint(s.pool.QueryRow(ctx, `SELECT `+checkpointColumns+` FROM checkpoints WHERE id = $1`, id))
	if isNoRows(err) {
		return c, fmt.Errorf("get checkpoint %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return c, fmt.Errorf("get checkpoint %s: %w", id, err)
	}
	return c, nil
}

// ListCheckpoints implements checkpoints.Store.
func (s *Store) ListCheckpoints(ctx context.Context, f checkpoints.Filter) ([]checkpoints.Checkpoint, error) {
	if f.RunID == "" && f.WaitpointID == "" {
		return nil, errors.New("list checkpoints: no run or waitpoint")
	}
	rows, err := s.pool.Query(ctx, `SELECT `+checkpointColumns+` FROM checkpoints
		WHERE ($1 = '' OR run_id = $1) AND ($2 = '' OR waitpoint_id = $2) ORDER BY created_at, id`, f.RunID, f.WaitpointID)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints %+v: %w", f, err)
	}
	defer rows.Close()
	out := []checkpoints.Checkpoint{}
	for rows.Next() {
		c, err := scanCheckpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("list checkpoints %+v: %w", f, err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// DeleteCheckpoint implements checkpoints.Store; deleting an unknown
// checkpoint is no error.
func (s *Store) DeleteCheckpoint(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM checkpoints WHERE id = $1`, id); err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", id, err)
	}
	return nil
}
