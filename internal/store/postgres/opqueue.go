package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/workspaces"
)

var _ workspaces.OpQueue = (*Store)(nil)

// QueueOp implements workspaces.OpQueue.
func (s *Store) QueueOp(ctx context.Context, id, host string, op []byte, at time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO op_queue (id, host, op, queued_at) VALUES ($1, $2, $3, $4)`, id, host, string(op), at)
	return err
}

// ClaimQueuedOp implements workspaces.OpQueue.
func (s *Store) ClaimQueuedOp(ctx context.Context, id string, at time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE op_queue SET taken_at = $1 WHERE id = $2 AND taken_at IS NULL`, at, id)
	return err == nil && tag.RowsAffected() == 1, err
}

// TakeQueuedOp implements workspaces.OpQueue: replicas polling at once
// each take a different operation (SKIP LOCKED).
func (s *Store) TakeQueuedOp(ctx context.Context, host string, at time.Time) (id string, op []byte, err error) {
	var data string
	err = s.pool.QueryRow(ctx, `UPDATE op_queue SET taken_at = $2 WHERE id = (
			SELECT id FROM op_queue WHERE taken_at IS NULL AND (host = '' OR host = $1)
			ORDER BY queued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING id, op`, host, at).Scan(&id, &data)
	if isNoRows(err) {
		return "", nil, workspaces.ErrNoOp
	}
	return id, []byte(data), err
}

// FinishQueuedOp implements workspaces.OpQueue.
func (s *Store) FinishQueuedOp(ctx context.Context, id string, result []byte) error {
	return s.changeQueuedOp(ctx, id, `UPDATE op_queue SET result = $1 WHERE id = $2`, string(result), id)
}

// AppendQueuedOutput implements workspaces.OpQueue.
func (s *Store) AppendQueuedOutput(ctx context.Context, id string, out []byte) error {
	return s.changeQueuedOp(ctx, id, `INSERT INTO op_queue_output (op_id, data) SELECT id, $1 FROM op_queue WHERE id = $2`, string(out), id)
}

// changeQueuedOp runs a statement that changes one row for operation
// id; none is ErrNotFound (the operation was dropped).
func (s *Store) changeQueuedOp(ctx context.Context, id, query string, args ...any) error {
	tag, err := s.pool.Exec(ctx, query, args...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("queued workspace operation %s: %w", id, workspaces.ErrNotFound)
	}
	return nil
}

// QueuedResult implements workspaces.OpQueue.
func (s *Store) QueuedResult(ctx context.Context, id string) ([]byte, bool, error) {
	var res *string
	err := s.pool.QueryRow(ctx, `SELECT result FROM op_queue WHERE id = $1`, id).Scan(&res)
	if isNoRows(err) {
		return nil, false, fmt.Errorf("queued workspace operation %s: %w", id, workspaces.ErrNotFound)
	}
	if err != nil || res == nil {
		return nil, false, err
	}
	return []byte(*res), true, nil
}

// QueuedOutputs implements workspaces.OpQueue.
func (s *Store) QueuedOutputs(ctx context.Context, id string, after int64) ([]workspaces.QueuedOutput, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, data FROM op_queue_output WHERE op_id = $1 AND seq > $2 ORDER BY seq`, id, after)
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
	_, err := s.pool.Exec(ctx, `WITH o AS (DELETE FROM op_queue_output WHERE op_id = $1) DELETE FROM op_queue WHERE id = $1`, id)
	return err
}

// SweepQueuedOps implements workspaces.OpQueue.
func (s *Store) SweepQueuedOps(ctx context.Context, before time.Time) error {
	_, err := s.pool.Exec(ctx, `WITH gone AS (DELETE FROM op_queue WHERE queued_at < $1 RETURNING id)
		DELETE FROM op_queue_output WHERE op_id IN (SELECT id FROM gone)`, before)
	return err
}
