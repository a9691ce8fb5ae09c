package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store"
)

// eventsPerInsert bounds one multi-row INSERT (5 parameters a row, well
// under SQLite's 32766-parameter limit).
const eventsPerInsert = 500

// AppendEvents appends evs to the run's log with the sequence numbers after
// its last_seq, which it advances in the same transaction.
func (s *Store) AppendEvents(ctx context.Context, id string, evs []runs.NewEvent) ([]runs.Event, error) {
	var out []runs.Event
	err := s.write(ctx, func(tx *sql.Tx) error {
		var last int64
		err := tx.QueryRowContext(ctx, `UPDATE runs SET last_seq = last_seq + ? WHERE id = ? RETURNING last_seq`,
			len(evs), id).Scan(&last)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("append events to run %s: %w", id, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("append events to run %s: %w", id, err)
		}
		out = store.NewEvents(id, last-int64(len(evs)), evs)
		return insertEvents(ctx, tx, out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// insertEvents inserts evs with multi-row INSERTs.
func insertEvents(ctx context.Context, tx *sql.Tx, evs []runs.Event) error {
	for len(evs) > 0 {
		n := min(len(evs), eventsPerInsert)
		var q strings.Builder
		q.WriteString(`INSERT INTO run_events (run_id, seq, type, time, data) VALUES `)
		args := make([]any, 0, 5*n)
		for i, e := range evs[:n] {
			if i > 0 {
				q.WriteByte(',')
			}
			q.WriteString("(?, ?, ?, ?, ?)")
			args = append(args, e.RunID, e.Seq, e.Type, fmtTime(e.Time), nullText(e.Data))
		}
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("insert events: %w", err)
		}
		evs = evs[n:]
	}
	return nil
}

// ListEvents returns up to limit events of the run with Seq > after, in
// order; errdefs.ErrNotFound for an unknown run.
func (s *Store) ListEvents(ctx context.Context, id string, after int64, limit int) ([]runs.Event, error) {
	limit = store.Limit(limit, store.DefaultEventsLimit, store.MaxEventsLimit)
	rows, err := s.r.QueryContext(ctx, `SELECT seq, type, time, data FROM run_events
		WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, id, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", id, err)
	}
	defer rows.Close()
	evs := []runs.Event{}
	for rows.Next() {
		e := runs.Event{RunID: id}
		var at string
		var data sql.NullString
		if err := rows.Scan(&e.Seq, &e.Type, &at, &data); err != nil {
			return nil, fmt.Errorf("list events of run %s: %w", id, err)
		}
		if e.Time, err = parseTime(at); err != nil {
			return nil, err
		}
		if data.Valid {
			e.Data = json.RawMessage(data.String)
		}
		evs = append(evs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", id, err)
	}
	if len(evs) == 0 {
		var one int
		err := s.r.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("list events of run %s: %w", id, errdefs.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("list events of run %s: %w", id, err)
		}
	}
	return evs, nil
}
