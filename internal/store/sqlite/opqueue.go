package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

var _ workspaces.OpQueue = (*Store)(nil)

// QueueOp implements workspaces.OpQueue.
func (s *Store) QueueOp(ctx context.Context, id, host string, op []byte, at time.Time) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO op_queue (id, host, op, queued_at) VALUES (?, ?, ?, ?)`, id, host, string(op), fmtTime(at))
		return err
	})
}

// ClaimQueuedOp implements workspaces.OpQueue.
func (s *Store) ClaimQueuedOp(ctx context.Context, id string, at time.Time) (bool, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE op_queue SET taken_at = ? WHERE id = ? AND taken_at IS NULL`, fmtTime(at), id)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return n == 1, err
}

// TakeQueuedOp implements workspaces.OpQueue.
func (s *Store) TakeQueuedOp(ctx context.Context, host string, at time.Time) (id string, op []byte, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		var data string
		err := tx.QueryRowContext(ctx, `SELECT id, op FROM op_queue WHERE taken_at IS NULL AND (host = '' OR host = ?)
			ORDER BY queued_at, id LIMIT 1`, host).Scan(&id, &data)
		if errors.Is(err, sql.ErrNoRows) {
			return workspaces.ErrNoOp
		}
		if err != nil {
			return err
		}
		op = []byte(data)
		_, err = tx.ExecContext(ctx, `UPDATE op_queue SET taken_at = ? WHERE id = ?`, fmtTime(at), id)
		return err
	})
	return id, op, err
}

// FinishQueuedOp implements workspaces.OpQueue.
func (s *Store) FinishQueuedOp(ctx context.Context, id string, result []byte) error {
	return s.changeQueuedOp(ctx, id, `UPDATE op_queue SET result = ? WHERE id = ?`, string(result), id)
}

// AppendQueuedOutput implements workspaces.OpQueue.
func (s *Store) AppendQueuedOutput(ctx context.Context, id string, out []byte) error {
	return s.changeQueuedOp(ctx, id, `INSERT INTO op_queue_output (op_id, data) SELECT id, ? FROM op_queue WHERE id = ?`, string(out), id)
}

// changeQueuedOp runs a statement that changes one row for operation
// id; none is ErrNotFound (the operation was dropped).
func (s *Store) changeQueuedOp(ctx context.Context, id, query string, args ...any) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, fmt.Errorf("queued workspace operation %s: %w", id, errdefs.ErrNotFound))
		}
		return nil
	})
}

// QueuedResult implements workspaces.OpQueue.
func (s *Store) QueuedResult(ctx context.Context, id string) ([]byte, bool, error) {
	var res sql.NullString
	err := s.r.QueryRowContext(ctx, `SELECT result FROM op_queue WHERE id = ?`, id).Scan(&res)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, fmt.Errorf("queued workspace operation %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil || !res.Valid {
		return nil, false, err
	}
	return []byte(res.String), true, nil
}

// QueuedOutputs implements workspaces.OpQueue.
func (s *Store) QueuedOutputs(ctx context.Context, id string, after int64) ([]workspaces.QueuedOutput, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT seq, data FROM op_queue_output WHERE op_id = ? AND seq > ? ORDER BY seq`, id, after)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []workspaces.QueuedOutput
	for rows.Next() {
		var q workspaces.QueuedOutput
		var data string
		if err := rows.Scan(&q.Seq, &data); err != nil {
			return nil, err
		}
		q.Data = []byte(data)
		out = append(out, q)
	}
	return out, rows.Err()
}

// DropQueuedOp implements workspaces.OpQueue.
func (s *Store) DropQueuedOp(ctx context.Context, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM op_queue_output WHERE op_id = ?`, id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM op_queue WHERE id = ?`, id)
		return err
	})
}

// SweepQueuedOps implements workspaces.OpQueue.
func (s *Store) SweepQueuedOps(ctx context.Context, before time.Time) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM op_queue_output WHERE op_id IN (SELECT id FROM op_queue WHERE queued_at < ?)`, fmtTime(before)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM op_queue WHERE queued_at < ?`, fmtTime(before))
		return err
	})
}
