package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/errdefs"
)

var _ checkpoints.Store = (*Store)(nil)

const checkpointColumns = `id, run_id, waitpoint_id, exec_id, request_id, arch, tier, kernel, rootfs, size, created_at`

// CreateCheckpoint implements checkpoints.Store.
func (s *Store) CreateCheckpoint(ctx context.Context, c checkpoints.Checkpoint) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("create checkpoint: %w", err)
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO checkpoints (`+checkpointColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			c.ID, c.RunID, c.WaitpointID, int64(c.ExecID), c.RequestID, c.Arch, c.Tier, c.Kernel, c.Rootfs, c.Size, fmtTime(c.CreatedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("create checkpoint %s: %w", c.ID, err)
	}
	return nil
}

func scanCheckpoint(sc scanner) (checkpoints.Checkpoint, error) {
	var c checkpoints.Checkpoint
	var exec int64
	var created string
	if err := sc.Scan(&c.ID, &c.RunID, &c.WaitpointID, &exec, &c.RequestID, &c.Arch, &c.Tier, &c.Kernel, &c.Rootfs, &c.Size, &created); err != nil {
		return c, err
	}
	c.ExecID = uint64(exec)
	var err error
	c.CreatedAt, err = parseTime(created)
	return c, err
}

// GetCheckpoint implements checkpoints.Store.
func (s *Store) GetCheckpoint(ctx context.Context, id string) (checkpoints.Checkpoint, error) {
	c, err := scanCheckpoint(s.r.QueryRowContext(ctx, `SELECT `+checkpointColumns+` FROM checkpoints WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
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
	rows, err := s.r.QueryContext(ctx, `SELECT `+checkpointColumns+` FROM checkpoints
		WHERE (? = '' OR run_id = ?) AND (? = '' OR waitpoint_id = ?) ORDER BY created_at, id`, f.RunID, f.RunID, f.WaitpointID, f.WaitpointID)
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
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM checkpoints WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", id, err)
	}
	return nil
}
