package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/store"
	"github.com/helmr/helmr/internal/workers"
)

// UpsertWorker records w's capabilities and last-seen time, replacing what
// was recorded for its id.
func (s *Store) UpsertWorker(ctx context.Context, w workers.Worker) error {
	w, caps, err := store.NewWorker(w)
	if err != nil {
		return err
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO workers (id, capabilities, last_seen) VALUES (?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET capabilities = excluded.capabilities, last_seen = excluded.last_seen`,
			w.ID, caps, fmtTime(w.LastSeen))
		return err
	})
	if err != nil {
		return fmt.Errorf("upsert worker %s: %w", w.ID, err)
	}
	return nil
}

// ListWorkers returns the workers seen at or after since, by id.
func (s *Store) ListWorkers(ctx context.Context, since time.Time) ([]workers.Worker, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, capabilities, last_seen FROM workers
		WHERE last_seen >= ? ORDER BY id`, store.Since(since).Format(timeFormat))
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	defer rows.Close()
	out := []workers.Worker{}
	for rows.Next() {
		var (
			w          workers.Worker
			caps, seen string
		)
		if err := rows.Scan(&w.ID, &caps, &seen); err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		if w.Capabilities, err = store.DecodeCapabilities(w.ID, caps); err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		if w.LastSeen, err = parseTime(seen); err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out, nil
}
