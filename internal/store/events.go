package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// eventsPerInsert bounds one multi-row INSERT (5 parameters a row, well
// under SQLite's 32766 and PostgreSQL's 65535 parameters).
const eventsPerInsert = 500

// AppendEvents appends evs to the run's log with the sequence numbers after
// its last_seq, which it advances in the same transaction. The UPDATE …
// RETURNING takes the run's row, so concurrent appenders get disjoint,
// consecutive ranges.
func (db *DB) AppendEvents(ctx context.Context, id string, evs []runs.NewEvent) ([]runs.Event, error) {
	var out []runs.Event
	err := db.write(ctx, func(tx txConn) error {
		var last int64
		err := tx.queryRow(ctx, `UPDATE runs SET last_seq = last_seq + ? WHERE id = ? RETURNING last_seq`,
			len(evs), id).Scan(&last)
		if err != nil {
			return wrap(err, errdefs.ErrNotFound, "append events to run %s", id)
		}
		out = NewEvents(id, last-int64(len(evs)), evs)
		return insertEvents(ctx, tx, out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// insertEvents inserts evs with multi-row INSERTs. The hot path of log
// appends: times are encoded here, sparing args a copy.
func insertEvents(ctx context.Context, tx txConn, evs []runs.Event) error {
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
			args = append(args, e.RunID, e.Seq, e.Type, tx.d.Time(e.Time), nullText(e.Data))
		}
		if _, err := tx.exec(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("insert events: %w", err)
		}
		evs = evs[n:]
	}
	return nil
}

// ListEvents returns up to limit events of the run with Seq > after, in
// order; errdefs.ErrNotFound for an unknown run.
func (db *DB) ListEvents(ctx context.Context, id string, after int64, limit int) ([]runs.Event, error) {
	limit = Limit(limit, DefaultEventsLimit, MaxEventsLimit)
	rows, err := db.read().query(ctx, `SELECT seq, type, time, data FROM run_events
		WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, id, after, limit)
	evs, err := scanAll(rows, err, func(row scanner) (runs.Event, error) {
		e := runs.Event{RunID: id}
		err := row.Scan(&e.Seq, &e.Type, timeCol{&e.Time}, jsonCol{&e.Data})
		return e, err
	})
	if err == nil && len(evs) == 0 {
		err = db.runExists(ctx, id)
	}
	if err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", id, err)
	}
	return evs, nil
}

// runExists returns errdefs.ErrNotFound when there is no run id.
func (db *DB) runExists(ctx context.Context, id string) error {
	var one int
	return orMissing(db.read().queryRow(ctx, `SELECT 1 FROM runs WHERE id = ?`, id).Scan(&one), errdefs.ErrNotFound)
}
