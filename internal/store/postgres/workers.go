package postgres

import (
	"context"
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
	_, err = s.pool.Exec(ctx, `INSERT INTO workers (id, capabilities, last_seen) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET capabilities = excluded.capabilities, last_seen = excluded.last_seen`,
		w.ID, caps, w.LastSeen)
	if err != nil {
		return fmt.Errorf("upsert worker %s: %w", w.ID, err)
	}
	return nil
}

// ListWorkers returns the workers seen at or after since, by id.
func (s *Store) ListWorkers(ctx context.Context, since time.Time) ([]workers.Worker, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, capabilities, last_seen FROM workers
		WHERE last_seen >= $1 ORDER BY id`, store.Since(since))
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	defer rows.Close()
	out := []workers.Worker{}
	for rows.Next() {
		var (
			w    workers.Worker
			caps string
		)
		if err := rows.Scan(&w.ID, &caps, &w.LastSeen); err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		if w.Capabilities, err = store.DecodeCapabilities(w.ID, caps); err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		w.LastSeen = w.LastSeen.UTC()
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out, nil
}
