package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/errdefs"
)

const checkpointColumns = `id, run_id, waitpoint_id, exec_id, request_id, arch, tier, kernel, rootfs, size, created_at, restored_at`

// CreateCheckpoint implements checkpoints.Store.
func (db *DB) CreateCheckpoint(ctx context.Context, c checkpoints.Checkpoint) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("create checkpoint: %w", err)
	}
	_, err := db.writer().exec(ctx, `INSERT INTO checkpoints (`+checkpointColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.ID, c.RunID, c.WaitpointID, int64(c.ExecID), c.RequestID, c.Arch, c.Tier, c.Kernel, c.Rootfs, c.Size, Time(c.CreatedAt), TimePtr(c.RestoredAt))
	if err != nil {
		return fmt.Errorf("create checkpoint %s: %w", c.ID, err)
	}
	return nil
}

func scanCheckpoint(row scanner) (checkpoints.Checkpoint, error) {
	var c checkpoints.Checkpoint
	var exec int64
	err := row.Scan(&c.ID, &c.RunID, &c.WaitpointID, &exec, &c.RequestID, &c.Arch, &c.Tier, &c.Kernel, &c.Rootfs, &c.Size,
		timeCol{&c.CreatedAt}, nullTimeCol{&c.RestoredAt})
	c.ExecID = uint64(exec)
	return c, err
}

// GetCheckpoint implements checkpoints.Store.
func (db *DB) GetCheckpoint(ctx context.Context, id string) (checkpoints.Checkpoint, error) {
	c, err := scanCheckpoint(db.read().queryRow(ctx, `SELECT `+checkpointColumns+` FROM checkpoints WHERE id = ?`, id))
	if err != nil {
		return c, wrap(err, errdefs.ErrNotFound, "get checkpoint %s", id)
	}
	return c, nil
}

// ListCheckpoints implements checkpoints.Store.
func (db *DB) ListCheckpoints(ctx context.Context, f checkpoints.Filter) ([]checkpoints.Checkpoint, error) {
	var where []string
	var args []any
	if f.RunID != "" {
		where, args = append(where, "run_id = ?"), append(args, f.RunID)
	}
	if f.WaitpointID != "" {
		where, args = append(where, "waitpoint_id = ?"), append(args, f.WaitpointID)
	}
	if len(where) == 0 {
		return nil, errors.New("list checkpoints: no run or waitpoint")
	}
	rows, err := db.read().query(ctx, `SELECT `+checkpointColumns+` FROM checkpoints
		WHERE `+strings.Join(where, " AND ")+` ORDER BY created_at, id`, args...)
	out, err := scanAll(rows, err, scanCheckpoint)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints %+v: %w", f, err)
	}
	return out, nil
}

// RestoredCheckpoint implements checkpoints.Store.
func (db *DB) RestoredCheckpoint(ctx context.Context, id string, at time.Time) error {
	res, err := db.writer().exec(ctx, `UPDATE checkpoints SET restored_at = ? WHERE id = ?`, Time(at), id)
	if err != nil {
		return fmt.Errorf("record checkpoint %s restored: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("record checkpoint %s restored: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

// DeleteCheckpoint implements checkpoints.Store; deleting an unknown
// checkpoint is no error.
func (db *DB) DeleteCheckpoint(ctx context.Context, id string) error {
	if _, err := db.writer().exec(ctx, `DELETE FROM checkpoints WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", id, err)
	}
	return nil
}
