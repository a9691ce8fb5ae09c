package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// AppendRecord implements runs.SessionStore. Holding the run's row orders
// concurrent appenders and transitions, so the next seq is the stream's
// highest plus one and no record follows the run's end.
func (db *DB) AppendRecord(ctx context.Context, runID, stream string, rec runs.NewRecord) (runs.Record, bool, error) {
	out := runs.Record{RunID: runID, Stream: stream, ID: rec.ID, Time: Time(rec.Time), Data: rec.Data}
	created := false
	err := db.write(ctx, func(tx txConn) error {
		var status runs.Status
		err := tx.queryRow(ctx, `SELECT status FROM runs WHERE id = ?`+db.d.ForUpdate, runID).Scan(&status)
		if err != nil {
			return wrap(err, errdefs.ErrNotFound, "append to the %s of run %s", stream, runID)
		}
		if rec.ID != "" {
			first, err := scanRecord(runID, stream, tx.queryRow(ctx, `SELECT seq, idempotency_key, time, data
				FROM run_stream_records WHERE run_id = ? AND stream = ? AND idempotency_key = ?`, runID, stream, rec.ID))
			if err == nil {
				out = first
				return CheckRepeat(first, rec)
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("append to the %s of run %s: %w", stream, runID, err)
			}
		}
		if err := CheckOpen(runID, stream, status); err != nil {
			return err
		}
		err = tx.queryRow(ctx, `INSERT INTO run_stream_records (run_id, stream, seq, idempotency_key, time, data)
			SELECT ?, ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ? FROM run_stream_records WHERE run_id = ? AND stream = ?
			RETURNING seq`, runID, stream, nullText(rec.ID), out.Time, string(rec.Data), runID, stream).Scan(&out.Seq)
		if err != nil {
			return fmt.Errorf("append to the %s of run %s: %w", stream, runID, err)
		}
		created = true
		return nil
	})
	if err != nil {
		return runs.Record{}, false, err
	}
	return out, created, nil
}

func scanRecord(runID, stream string, row scanner) (runs.Record, error) {
	r := runs.Record{RunID: runID, Stream: stream}
	var data string
	if err := row.Scan(&r.Seq, textCol{&r.ID}, timeCol{&r.Time}, &data); err != nil {
		return runs.Record{}, err
	}
	r.Data = json.RawMessage(data)
	return r, nil
}

// ListRecords implements runs.SessionStore.
func (db *DB) ListRecords(ctx context.Context, runID, stream string, after int64, limit int) ([]runs.Record, error) {
	limit = Limit(limit, DefaultRecordsLimit, MaxRecordsLimit)
	rows, err := db.read().query(ctx, `SELECT seq, idempotency_key, time, data FROM run_stream_records
		WHERE run_id = ? AND stream = ? AND seq > ? ORDER BY seq LIMIT ?`, runID, stream, after, limit)
	out, err := scanAll(rows, err, func(row scanner) (runs.Record, error) { return scanRecord(runID, stream, row) })
	if err == nil && len(out) == 0 {
		err = db.runExists(ctx, runID)
	}
	if err != nil {
		return nil, fmt.Errorf("list the %s of run %s: %w", stream, runID, err)
	}
	return out, nil
}

// SetMetadata implements runs.SessionStore.
func (db *DB) SetMetadata(ctx context.Context, runID, key string, value json.RawMessage) error {
	n, err := db.writer().changed(ctx, `INSERT INTO run_metadata (run_id, key, value, updated_at)
		SELECT id, ?, ?, ? FROM runs WHERE id = ?
		ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		key, string(value), Time(time.Time{}), runID)
	if err != nil {
		return fmt.Errorf("set metadata of run %s: %w", runID, err)
	}
	if n == 0 {
		return fmt.Errorf("set metadata of run %s: %w", runID, errdefs.ErrNotFound)
	}
	return nil
}

// Metadata implements runs.SessionStore.
func (db *DB) Metadata(ctx context.Context, runID string) (map[string]json.RawMessage, error) {
	rows, err := db.read().query(ctx, `SELECT key, value FROM run_metadata WHERE run_id = ?`, runID)
	if err != nil {
		return nil, fmt.Errorf("metadata of run %s: %w", runID, err)
	}
	defer rows.Close()
	out := map[string]json.RawMessage{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("metadata of run %s: %w", runID, err)
		}
		out[k] = json.RawMessage(v)
	}
	err = rows.Err()
	if err == nil && len(out) == 0 {
		err = db.runExists(ctx, runID)
	}
	if err != nil {
		return nil, fmt.Errorf("metadata of run %s: %w", runID, err)
	}
	return out, nil
}
