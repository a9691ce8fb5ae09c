package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store"
)

var _ runs.SessionStore = (*Store)(nil)

// AppendRecord implements runs.SessionStore. Writes are serialized, so the
// next seq is the stream's highest plus one.
func (s *Store) AppendRecord(ctx context.Context, runID, stream string, rec runs.NewRecord) (runs.Record, bool, error) {
	out := runs.Record{RunID: runID, Stream: stream, ID: rec.ID, Time: store.Time(rec.Time), Data: rec.Data}
	created := false
	err := s.write(ctx, func(tx *sql.Tx) error {
		var status runs.Status
		err := tx.QueryRowContext(ctx, `SELECT status FROM runs WHERE id = ?`, runID).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("append to the %s of run %s: %w", stream, runID, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("append to the %s of run %s: %w", stream, runID, err)
		}
		if rec.ID != "" {
			first, err := scanRecord(runID, stream, tx.QueryRowContext(ctx, `SELECT seq, idempotency_key, time, data
				FROM run_stream_records WHERE run_id = ? AND stream = ? AND idempotency_key = ?`, runID, stream, rec.ID))
			if err == nil {
				out = first
				return store.CheckRepeat(first, rec)
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("append to the %s of run %s: %w", stream, runID, err)
			}
		}
		if err := store.CheckOpen(runID, stream, status); err != nil {
			return err
		}
		err = tx.QueryRowContext(ctx, `INSERT INTO run_stream_records (run_id, stream, seq, idempotency_key, time, data)
			SELECT ?1, ?2, COALESCE(MAX(seq), 0) + 1, ?3, ?4, ?5 FROM run_stream_records WHERE run_id = ?1 AND stream = ?2
			RETURNING seq`, runID, stream, nullText(rec.ID), fmtTime(out.Time), string(rec.Data)).Scan(&out.Seq)
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

type rowScanner interface{ Scan(dest ...any) error }

func scanRecord(runID, stream string, row rowScanner) (runs.Record, error) {
	r := runs.Record{RunID: runID, Stream: stream}
	var key sql.NullString
	var at, data string
	if err := row.Scan(&r.Seq, &key, &at, &data); err != nil {
		return runs.Record{}, err
	}
	t, err := parseTime(at)
	if err != nil {
		return runs.Record{}, err
	}
	r.ID, r.Time, r.Data = key.String, t, json.RawMessage(data)
	return r, nil
}

// ListRecords implements runs.SessionStore.
func (s *Store) ListRecords(ctx context.Context, runID, stream string, after int64, limit int) ([]runs.Record, error) {
	limit = store.Limit(limit, store.DefaultRecordsLimit, store.MaxRecordsLimit)
	rows, err := s.r.QueryContext(ctx, `SELECT seq, idempotency_key, time, data FROM run_stream_records
		WHERE run_id = ? AND stream = ? AND seq > ? ORDER BY seq LIMIT ?`, runID, stream, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list the %s of run %s: %w", stream, runID, err)
	}
	defer rows.Close()
	out := []runs.Record{}
	for rows.Next() {
		r, err := scanRecord(runID, stream, rows)
		if err != nil {
			return nil, fmt.Errorf("list the %s of run %s: %w", stream, runID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the %s of run %s: %w", stream, runID, err)
	}
	if len(out) == 0 {
		if err := s.runExists(ctx, runID); err != nil {
			return nil, fmt.Errorf("list the %s of run %s: %w", stream, runID, err)
		}
	}
	return out, nil
}

func (s *Store) runExists(ctx context.Context, runID string) error {
	var one int
	err := s.r.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, runID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return errdefs.ErrNotFound
	}
	return err
}

// SetMetadata implements runs.SessionStore.
func (s *Store) SetMetadata(ctx context.Context, runID, key string, value json.RawMessage) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, runID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("set metadata of run %s: %w", runID, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("set metadata of run %s: %w", runID, err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO run_metadata (run_id, key, value, updated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
			runID, key, string(value), fmtTime(store.Time(time.Time{})))
		if err != nil {
			return fmt.Errorf("set metadata of run %s: %w", runID, err)
		}
		return nil
	})
}

// Metadata implements runs.SessionStore.
func (s *Store) Metadata(ctx context.Context, runID string) (map[string]json.RawMessage, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT key, value FROM run_metadata WHERE run_id = ?`, runID)
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
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("metadata of run %s: %w", runID, err)
	}
	if len(out) == 0 {
		if err := s.runExists(ctx, runID); err != nil {
			return nil, fmt.Errorf("metadata of run %s: %w", runID, err)
		}
	}
	return out, nil
}
