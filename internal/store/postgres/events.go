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

// AppendEvents appends evs to the run's log. The UPDATE … RETURNING of
// last_seq takes the run's row lock, so concurrent appenders get disjoint,
// consecutive ranges.
func (s *Store) AppendEvents(ctx context.Context, id string, evs []runs.NewEvent) ([]runs.Event, error) {
	var out []runs.Event
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var last int64
		err := tx.QueryRow(ctx, `UPDATE runs SET last_seq = last_seq + $2 WHERE id = $1 RETURNING last_seq`,
			id, len(evs)).Scan(&last)
		if isNoRows(err) {
			return fmt.Errorf("append events to run %s: %w", id, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("append events to run %s: %w", id, err)
		}
		out = store.NewEvents(id, last-int64(len(evs)), evs)
		return insertEvents(ctx, tx, id, out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// insertEvents inserts evs of run id with one INSERT over unnested arrays.
func insertEvents(ctx context.Context, tx pgx.Tx, id string, evs []runs.Event) error {
	if len(evs) == 0 {
		return nil
	}
	seqs := make([]int64, len(evs))
	types := make([]string, len(evs))
	times := make([]time.Time, len(evs))
	data := make([]*string, len(evs))
	for i, e := range evs {
		seqs[i], types[i], times[i], data[i] = e.Seq, e.Type, e.Time, nullText(e.Data)
	}
	_, err := tx.Exec(ctx, `INSERT INTO run_events (run_id, seq, type, time, data)
		SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::timestamptz[], $5::text[])`,
		id, seqs, types, times, data)
	if err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	return nil
}

// ListEvents returns up to limit events of the run with Seq > after, in
// order; errdefs.ErrNotFound for an unknown run.
func (s *Store) ListEvents(ctx context.Context, id string, after int64, limit int) ([]runs.Event, error) {
	limit = store.Limit(limit, store.DefaultEventsLimit, store.MaxEventsLimit)
	rows, err := s.pool.Query(ctx, `SELECT seq, type, time, data FROM run_events
		WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, id, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", id, err)
	}
	defer rows.Close()
	evs := []runs.Event{}
	for rows.Next() {
		e := runs.Event{RunID: id}
		var data *string
		if err := rows.Scan(&e.Seq, &e.Type, &e.Time, &data); err != nil {
			return nil, fmt.Errorf("list events of run %s: %w", id, err)
		}
		e.Time = e.Time.UTC()
		if data != nil {
			e.Data = json.RawMessage(*data)
		}
		evs = append(evs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", id, err)
	}
	if len(evs) == 0 {
		var one int
		err := s.pool.QueryRow(ctx, `SELECT 1 FROM runs WHERE id = $1`, id).Scan(&one)
		if isNoRows(err) {
			return nil, fmt.Errorf("list events of run %s: %w", id, errdefs.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("list events of run %s: %w", id, err)
		}
	}
	return evs, nil
}
