package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store"
)

var _ runs.SessionStore = (*Store)(nil)

// AppendRecord implements runs.SessionStore. The run's row lock (SELECT …
// FOR UPDATE) orders concurrent appenders and transitions, so the next seq
// is the stream's highest plus one and no record follows the run's end.
func (s *Store) AppendRecord(ctx context.Context, runID, stream string, rec runs.NewRecord) (runs.Record, bool, error) {
	out := runs.Record{RunID: runID, Stream: stream, ID: rec.ID, Time: store.Time(rec.Time), Data: rec.Data}
	created := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var status runs.Status
		err := tx.QueryRow(ctx, `SELECT status FROM runs WHERE id = $1 FOR UPDATE`, runID).Scan(&status)
		if isNoRows(err) {
			return fmt.Errorf("append to the %s of run %s: %w", stream, runID, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("append to the %s of run %s: %w", stream, runID, err)
		}
		if rec.ID != "" {
			first, err := scanRecord(runID, stream, tx.QueryRow(ctx, `SELECT seq, idempotency_key, time, data
				FROM run_stream_records WHERE run_id = $1 AND stream = $2 AND idempotency_key = $3`, runID, stream, rec.ID))
			if err == nil {
				out = first
				return store.CheckRepeat(first, rec)
			}
			if !isNoRows(err) {
				return fmt.Errorf("append to the %s of run %s: %w", stream, runID, err)
			}
		}
		if err := store.CheckOpen(runID, stream, status); err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `INSERT INTO run_stream_records (run_id, stream, seq, idempotency_key, time, data)
			SELECT $1, $2, COALESCE(MAX(seq), 0) + 1, $3, $4, $5 FROM run_stream_records WHERE run_id = $1 AND stream = $2
			RETURNING seq`, runID, stream, nullText(rec.ID), out.Time, string(rec.Data)).Scan(&out.Seq)
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

func scanRecord(runID, stream string, row pgx.Row) (runs.Record, error) {
	r := runs.Record{RunID: runID, Stream: stream}
	var key *string
	var data string
	if err := row.Scan(&r.Seq, &key, &r.Time, &data); err != nil {
		return runs.Record{}, err
	}
	if key != nil {
		r.ID = *key
	}
	r.Time, r.Data = r.Time.UTC(), json.RawMessage(data)
	return r, nil
}

// ListRecords implements runs.SessionStore.
func (s *Store) ListRecords(ctx context.Context, runID, stream string, after int64, limit int) ([]runs.Record, error) {
	limit = store.Limit(limit, store.DefaultRecordsLimit, store.MaxRecordsLimit)
	rows, err := s.pool.Query(ctx, `SELECT seq, idempotency_key, time, data FROM run_stream_records
		WHERE run_id = $1 AND stream = $2 AND seq > $3 ORDER BY seq LIMIT $4`, runID, stream, after, limit)
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
	err := s.pool.QueryRow(ctx, `SELECT 1 FROM runs WHERE id = $1`, runID).Scan(&one)
	if isNoRows(err) {
		return errdefs.ErrNotFound
	}
	return err
}

// SetMetadata implements runs.SessionStore.
func (s *Store) SetMetadata(ctx context.Context, runID, key string, value json.RawMessage) error {
	tag, err := s.pool.Exec(ctx, `INSERT INTO run_metadata (run_id, key, value, updated_at)
		SELECT id, $2, $3, $4 FROM runs WHERE id = $1
		ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		runID, key, string(value), store.Time(time.Time{}))
	if err != nil {
		return fmt.Errorf("set metadata of run %s: %w", runID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set metadata of run %s: %w", runID, errdefs.ErrNotFound)
	}
	return nil
}

// Metadata implements runs.SessionStore.
func (s *Store) Metadata(ctx context.Context, runID string) (map[string]json.RawMessage, error) {
	rows, err := s.pool.Query(ctx, `SELECT key, value FROM run_metadata WHERE run_id = $1`, runID)
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
