package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/runs"
)

var _ runs.StatsStore = (*DB)(nil)

// RunStats implements runs.StatsStore. It reads only unfinished runs,
// through the partial indexes of queued runs and of runs holding a slot,
// and the checkpoints of parked runs: its cost grows with the work under
// way, not with the runs' history.
func (db *DB) RunStats(ctx context.Context, now time.Time) (runs.Stats, error) {
	st := runs.Stats{Live: map[runs.Status]int{}}
	var queued, due sql.NullInt64
	var oldest *time.Time
	now = Time(now)
	err := db.read().queryRow(ctx, `SELECT COUNT(*),
		SUM(CASE WHEN available_at IS NULL OR available_at <= ? THEN 1 ELSE 0 END),
		MIN(CASE WHEN available_at IS NULL OR available_at <= ? THEN
			(CASE WHEN available_at IS NOT NULL AND available_at > created_at THEN available_at ELSE created_at END) END)
		FROM runs WHERE status = 'QUEUED'`, now, now).Scan(&queued, &due, nullTimeCol{&oldest})
	if err != nil {
		return st, fmt.Errorf("count queued runs: %w", err)
	}
	st.Live[runs.StatusQueued], st.Due = int(queued.Int64), int(due.Int64)
	if oldest != nil {
		st.OldestDue = *oldest
	}
	rows, err := db.read().query(ctx, `SELECT status, COUNT(*) FROM runs WHERE holds_slot = 1 GROUP BY status`)
	if err != nil {
		return st, fmt.Errorf("count started runs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s runs.Status
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return st, err
		}
		st.Live[s] += n
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("count started runs: %w", err)
	}
	err = db.read().queryRow(ctx, `SELECT COUNT(DISTINCT c.run_id) FROM checkpoints c JOIN runs r ON r.id = c.run_id
		WHERE r.status = 'WAITING' AND r.holds_slot = 0 AND c.restored_at IS NULL`).Scan(&st.Parked)
	if err != nil {
		return st, fmt.Errorf("count parked runs: %w", err)
	}
	st.Live[runs.StatusWaiting] += st.Parked
	return st, nil
}

// Ping reports whether the store answers: a closed store or a database
// out of reach fails it (readiness).
func (db *DB) Ping(ctx context.Context) error {
	var one int
	if err := db.read().queryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("ping the store: %w", err)
	}
	return nil
}
