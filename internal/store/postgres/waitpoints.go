package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/store"
	"github.com/helmr/helmr/internal/waitpoints"
)

const waitpointColumns = `id, project, env, run_id, kind, status, display_text, schema, tags,
	idempotency_key, timeout_at, data, reason, callback_hash, created_at, waited_at, completed_at`

func scanWaitpoint(row scanner) (waitpoints.Waitpoint, error) {
	var (
		w                 waitpoints.Waitpoint
		schema, key, data *string
	)
	err := row.Scan(&w.ID, &w.Project, &w.Env, &w.RunID, &w.Kind, &w.Status, &w.DisplayText, &schema, &w.Tags,
		&key, &w.TimeoutAt, &data, &w.Reason, &w.CallbackHash, &w.CreatedAt, &w.WaitedAt, &w.CompletedAt)
	if err != nil {
		return waitpoints.Waitpoint{}, err
	}
	if w.Tags == nil {
		w.Tags = []string{}
	}
	if schema != nil {
		w.Schema = json.RawMessage(*schema)
	}
	if data != nil {
		w.Data = json.RawMessage(*data)
	}
	if key != nil {
		w.IdempotencyKey = *key
	}
	w.CreatedAt = w.CreatedAt.UTC()
	w.TimeoutAt, w.WaitedAt, w.CompletedAt = utcPtr(w.TimeoutAt), utcPtr(w.WaitedAt), utcPtr(w.CompletedAt)
	return w, nil
}

// CreateWaitpoint inserts w as WAITING, or returns the waitpoint that
// already holds w's idempotency key in its project and env (concurrent
// creators with one key get the same waitpoint).
func (s *Store) CreateWaitpoint(ctx context.Context, w waitpoints.Waitpoint) (waitpoints.Waitpoint, bool, error) {
	w = store.NewWaitpoint(w)
	created := true
	var got waitpoints.Waitpoint
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO waitpoints (`+waitpointColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULL, '', $12, $13, NULL, NULL)
			ON CONFLICT (project, env, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`,
			w.ID, w.Project, w.Env, w.RunID, w.Kind, w.Status, w.DisplayText, nullText(w.Schema),
			w.Tags, nullText(w.IdempotencyKey), w.TimeoutAt, w.CallbackHash, w.CreatedAt)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			got = w
			return nil
		}
		created = false
		got, err = scanWaitpoint(tx.QueryRow(ctx, `SELECT `+waitpointColumns+` FROM waitpoints
			WHERE project = $1 AND env = $2 AND idempotency_key = $3`, w.Project, w.Env, w.IdempotencyKey))
		return err
	})
	if err != nil {
		return waitpoints.Waitpoint{}, false, fmt.Errorf("create waitpoint: %w", err)
	}
	return got, created, nil
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// GetWaitpoint returns the waitpoint with id, or errdefs.ErrNotFound.
func (s *Store) GetWaitpoint(ctx context.Context, id string) (waitpoints.Waitpoint, error) {
	return getWaitpoint(ctx, s.pool, id, "")
}

func getWaitpoint(ctx context.Context, q queryRower, id, suffix string) (waitpoints.Waitpoint, error) {
	w, err := scanWaitpoint(q.QueryRow(ctx, `SELECT `+waitpointColumns+` FROM waitpoints WHERE id = $1`+suffix, id))
	if isNoRows(err) {
		return waitpoints.Waitpoint{}, fmt.Errorf("get waitpoint %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return waitpoints.Waitpoint{}, fmt.Errorf("get waitpoint %s: %w", id, err)
	}
	return w, nil
}

// ListWaitpoints returns waitpoints matching f, newest first, a page at a
// time.
func (s *Store) ListWaitpoints(ctx context.Context, f waitpoints.Filter) (waitpoints.Page, error) {
	limit := store.Limit(f.Limit, store.DefaultWaitpointsLimit, store.MaxWaitpointsLimit)
	var where []string
	var args []any
	for _, c := range []struct{ col, val string }{
		{"project", f.Project}, {"env", f.Env}, {"status", string(f.Status)}, {"run_id", f.RunID},
	} {
		if c.val != "" {
			args = append(args, c.val)
			where = append(where, fmt.Sprintf("%s = $%d", c.col, len(args)))
		}
	}
	if f.Tag != "" {
		args = append(args, []string{f.Tag})
		where = append(where, fmt.Sprintf("tags @> $%d", len(args)))
	}
	if f.Waited {
		where = append(where, "waited_at IS NOT NULL")
	}
	if f.Cursor != "" {
		t, id, err := store.DecodeCursor(f.Cursor)
		if err != nil {
			return waitpoints.Page{}, fmt.Errorf("list waitpoints: %w", err)
		}
		args = append(args, t, id)
		where = append(where, fmt.Sprintf("(created_at, id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	q := `SELECT ` + waitpointColumns + ` FROM waitpoints`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, limit+1)
	q += fmt.Sprintf(" ORDER BY created_at DESC, id DESC LIMIT $%d", len(args))
	page := waitpoints.Page{Waitpoints: []waitpoints.Waitpoint{}}
	if err := s.queryWaitpoints(ctx, q, args, &page.Waitpoints); err != nil {
		return waitpoints.Page{}, fmt.Errorf("list waitpoints: %w", err)
	}
	if len(page.Waitpoints) > limit {
		page.Waitpoints = page.Waitpoints[:limit]
		last := page.Waitpoints[limit-1]
		page.NextCursor = store.EncodeCursor(last.CreatedAt, last.ID)
	}
	return page, nil
}

func (s *Store) queryWaitpoints(ctx context.Context, q string, args []any, out *[]waitpoints.Waitpoint) error {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		w, err := scanWaitpoint(rows)
		if err != nil {
			return err
		}
		*out = append(*out, w)
	}
	return rows.Err()
}

// ResolveWaitpoint moves a WAITING waitpoint to r.Status, holding its row
// lock (see waitpoints.Store).
func (s *Store) ResolveWaitpoint(ctx context.Context, id string, r waitpoints.Resolution) (waitpoints.Waitpoint, bool, error) {
	var w waitpoints.Waitpoint
	var changed bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if w, err = getWaitpoint(ctx, tx, id, " FOR UPDATE"); err != nil {
			return err
		}
		if changed, err = store.CheckResolution(w, r); err != nil || !changed {
			return err
		}
		at := store.Time(r.Time)
		w.Status, w.Data, w.Reason, w.CompletedAt = r.Status, r.Data, r.Reason, &at
		_, err = tx.Exec(ctx, `UPDATE waitpoints SET status = $1, data = $2, reason = $3, completed_at = $4
			WHERE id = $5`, w.Status, nullText(w.Data), w.Reason, at, id)
		return err
	})
	if err != nil {
		return waitpoints.Waitpoint{}, false, fmt.Errorf("resolve waitpoint %s: %w", id, err)
	}
	return w, changed, nil
}

// MarkWaited sets the waitpoint's waited_at, once.
func (s *Store) MarkWaited(ctx context.Context, id string, at time.Time) (waitpoints.Waitpoint, error) {
	w, err := scanWaitpoint(s.pool.QueryRow(ctx, `UPDATE waitpoints SET waited_at = COALESCE(waited_at, $1)
		WHERE id = $2 RETURNING `+waitpointColumns, store.Time(at), id))
	if isNoRows(err) {
		return waitpoints.Waitpoint{}, fmt.Errorf("mark waitpoint %s waited: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return waitpoints.Waitpoint{}, fmt.Errorf("mark waitpoint %s waited: %w", id, err)
	}
	return w, nil
}

// DueWaitpoints returns up to limit WAITING waitpoints due at now.
func (s *Store) DueWaitpoints(ctx context.Context, now time.Time, limit int) ([]waitpoints.Waitpoint, error) {
	out := []waitpoints.Waitpoint{}
	err := s.queryWaitpoints(ctx, `SELECT `+waitpointColumns+` FROM waitpoints
		WHERE status = 'WAITING' AND timeout_at IS NOT NULL AND timeout_at <= $1
		ORDER BY timeout_at, id LIMIT $2`, []any{now, max(limit, 1)}, &out)
	if err != nil {
		return nil, fmt.Errorf("due waitpoints: %w", err)
	}
	return out, nil
}
