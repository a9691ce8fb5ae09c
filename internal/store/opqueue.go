package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// QueueOp implements workspaces.OpQueue.
func (db *DB) QueueOp(ctx context.Context, id, host string, op []byte, at time.Time) error {
	return db.write(ctx, func(tx txConn) error {
		if _, err := tx.exec(ctx, `INSERT INTO op_queue (id, host, op, queued_at) VALUES (?, ?, ?, ?)`,
			id, host, string(op), Time(at)); err != nil {
			return err
		}
		return tx.notify(ctx, "")
	})
}

// ClaimQueuedOp implements workspaces.OpQueue.
func (db *DB) ClaimQueuedOp(ctx context.Context, id, by string, at time.Time) (bool, error) {
	n, err := db.writer().changed(ctx, `UPDATE op_queue SET taken_at = ?, taken_by = ? WHERE id = ? AND taken_at IS NULL`, Time(at), by, id)
	return err == nil && n == 1, err
}

// TakeQueuedOp implements workspaces.OpQueue: replicas polling at once
// each take a different operation.
func (db *DB) TakeQueuedOp(ctx context.Context, host, by string, at time.Time) (id string, op []byte, err error) {
	var data string
	err = db.writer().queryRow(ctx, `UPDATE op_queue SET taken_at = ?, taken_by = ? WHERE id = (
			SELECT id FROM op_queue WHERE taken_at IS NULL AND (host = '' OR host = ?)
			ORDER BY queued_at, id LIMIT 1`+db.d.SkipLocked+`)
		RETURNING id, op`, Time(at), by, host).Scan(&id, &data)
	if err != nil {
		return "", nil, orMissing(err, workspaces.ErrNoOp)
	}
	return id, []byte(data), nil
}

// FinishQueuedOp implements workspaces.OpQueue.
func (db *DB) FinishQueuedOp(ctx context.Context, id string, result []byte) error {
	return db.changeQueuedOp(ctx, id, `UPDATE op_queue SET result = ? WHERE id = ?`, string(result), id)
}

// AppendQueuedOutput implements workspaces.OpQueue.
func (db *DB) AppendQueuedOutput(ctx context.Context, id string, out []byte) error {
	return db.changeQueuedOp(ctx, id, `INSERT INTO op_queue_output (op_id, data) SELECT id, ? FROM op_queue WHERE id = ?`, string(out), id)
}

// changeQueuedOp runs a statement that changes one row for operation id,
// and tells the listeners; none is ErrNotFound (the operation was
// dropped).
func (db *DB) changeQueuedOp(ctx context.Context, id, query string, args ...any) error {
	return db.write(ctx, func(tx txConn) error {
		n, err := tx.changed(ctx, query, args...)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("queued workspace operation %s: %w", id, errdefs.ErrNotFound)
		}
		return tx.notify(ctx, id)
	})
}

// QueuedResult implements workspaces.OpQueue.
func (db *DB) QueuedResult(ctx context.Context, id string) ([]byte, bool, string, error) {
	var res []byte
	var by string
	err := db.read().queryRow(ctx, `SELECT result, taken_by FROM op_queue WHERE id = ?`, id).Scan(jsonCol{(*json.RawMessage)(&res)}, &by)
	if err != nil {
		return nil, false, "", wrap(err, errdefs.ErrNotFound, "queued workspace operation %s", id)
	}
	return res, res != nil, by, nil
}

// QueuedOutputs implements workspaces.OpQueue.
func (db *DB) QueuedOutputs(ctx context.Context, id string, after int64) ([]workspaces.QueuedOutput, error) {
	rows, err := db.read().query(ctx, `SELECT seq, data FROM op_queue_output WHERE op_id = ? AND seq > ? ORDER BY seq`, id, after)
	out, err := scanAll(rows, err, func(row scanner) (workspaces.QueuedOutput, error) {
		var q workspaces.QueuedOutput
		var data string
		err := row.Scan(&q.Seq, &data)
		q.Data = []byte(data)
		return q, err
	})
	return nilIfEmpty(out), err
}

// DropQueuedOp implements workspaces.OpQueue.
func (db *DB) DropQueuedOp(ctx context.Context, id string) error {
	return db.write(ctx, func(tx txConn) error {
		if _, err := tx.exec(ctx, `DELETE FROM op_queue_output WHERE op_id = ?`, id); err != nil {
			return err
		}
		_, err := tx.exec(ctx, `DELETE FROM op_queue WHERE id = ?`, id)
		return err
	})
}

// SweepQueuedOps implements workspaces.OpQueue.
func (db *DB) SweepQueuedOps(ctx context.Context, before time.Time) error {
	return db.write(ctx, func(tx txConn) error {
		if _, err := tx.exec(ctx, `DELETE FROM op_queue_output WHERE op_id IN (SELECT id FROM op_queue WHERE queued_at < ?)`, before); err != nil {
			return err
		}
		_, err := tx.exec(ctx, `DELETE FROM op_queue WHERE queued_at < ?`, before)
		return err
	})
}
