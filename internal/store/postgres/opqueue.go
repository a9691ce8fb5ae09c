package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

var (
	_ workspaces.OpQueue    = (*Store)(nil)
	_ workspaces.OpNotifier = (*Store)(nil)
)

// QueueOp implements workspaces.OpQueue.
func (s *Store) QueueOp(ctx context.Context, id, host string, op []byte, at time.Time) error {
	_, err := s.pool.Exec(ctx, `WITH q AS (INSERT INTO op_queue (id, host, op, queued_at) VALUES ($1, $2, $3, $4) RETURNING id)
		SELECT pg_notify($5, '') FROM q`, id, host, string(op), at, s.opsChannel(ctx))
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
// id, and tells the listeners (ListenOps); none is ErrNotFound (the
// operation was dropped).
func (s *Store) changeQueuedOp(ctx context.Context, id, query string, args ...any) error {
	var n int
	err := s.pool.QueryRow(ctx, `WITH c AS (`+query+` RETURNING 1)
		SELECT count(*) FROM c, LATERAL (SELECT pg_notify($`+fmt.Sprint(len(args)+1)+`, $`+fmt.Sprint(len(args)+2)+`)) n`,
		append(args, s.opsChannel(ctx), id)...).Scan(&n)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("queued workspace operation %s: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

// opsChannel is the channel of the notices of changes to the operations
// queue: one per schema, so that stores sharing a database in other
// schemas do not hear each other.
func (s *Store) opsChannel(ctx context.Context) string {
	s.chanOnce.Do(func() {
		var schema string
		if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil || schema == "public" {
			s.channel = "helmr_ops"
			return
		}
		sum := sha256.Sum256([]byte(schema))
		s.channel = "helmr_ops_" + hex.EncodeToString(sum[:8])
	})
	return s.channel
}

// ListenOps implements workspaces.OpNotifier with LISTEN on a connection
// of its own.
func (s *Store) ListenOps(ctx context.Context, changed func(id string)) {
	for ctx.Err() == nil {
		err := s.listenOps(ctx, changed)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("listen for workspace operations; polling meanwhile", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) listenOps(ctx context.Context, changed func(id string)) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // it listens for as long as it lives: not the pool's
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.opsChannel(ctx)}.Sanitize()); err != nil {
		return err
	}
	changed("") // what changed before it listened went unheard
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		changed(n.Payload)
	}
}

// QueuedResult implements workspaces.OpQueue.
func (s *Store) QueuedResult(ctx context.Context, id string) ([]byte, bool, error) {
	var res *string
	err := s.pool.QueryRow(ctx, `SELECT result FROM op_queue WHERE id = $1`, id).Scan(&res)
	if isNoRows(err) {
		return nil, false, fmt.Errorf("queued workspace operation %s: %w", id, errdefs.ErrNotFound)
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
