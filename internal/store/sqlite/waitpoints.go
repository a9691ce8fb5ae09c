package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/store"
	"github.com/helmr/helmr/internal/waitpoints"
)

const waitpointColumns = `id, project, env, run_id, kind, status, display_text, schema, tags,
	idempotency_key, timeout_at, data, reason, callback_hash, created_at, waited_at, completed_at`

func scanWaitpoint(row scanner) (waitpoints.Waitpoint, error) {
	var (
		w                          waitpoints.Waitpoint
		schema, key, timeout, data sql.NullString
		waited, completed          sql.NullString
		tags, created              string
	)
	err := row.Scan(&w.ID, &w.Project, &w.Env, &w.RunID, &w.Kind, &w.Status, &w.DisplayText, &schema, &tags,
		&key, &timeout, &data, &w.Reason, &w.CallbackHash, &created, &waited, &completed)
	if err != nil {
		return waitpoints.Waitpoint{}, err
	}
	if w.Tags, err = store.DecodeTags(w.ID, tags); err != nil {
		return waitpoints.Waitpoint{}, err
	}
	if schema.Valid {
		w.Schema = json.RawMessage(schema.String)
	}
	if data.Valid {
		w.Data = json.RawMessage(data.String)
	}
	w.IdempotencyKey = key.String
	var errs [4]error
	w.CreatedAt, errs[0] = parseTime(created)
	w.TimeoutAt, errs[1] = parseTimePtr(timeout)
	w.WaitedAt, errs[2] = parseTimePtr(waited)
	w.CompletedAt, errs[3] = parseTimePtr(completed)
	return w, errors.Join(errs[:]...)
}

// CreateWaitpoint inserts w as WAITING, or returns the waitpoint that
// already holds w's idempotency key in its project and env.
func (s *Store) CreateWaitpoint(ctx context.Context, w waitpoints.Waitpoint) (waitpoints.Waitpoint, bool, error) {
	w = store.NewWaitpoint(w)
	var existing *waitpoints.Waitpoint
	err := s.write(ctx, func(tx *sql.Tx) error {
		if w.IdempotencyKey != "" {
			old, err := scanWaitpoint(tx.QueryRowContext(ctx, `SELECT `+waitpointColumns+` FROM waitpoints
				WHERE project = ? AND env = ? AND idempotency_key = ?`, w.Project, w.Env, w.IdempotencyKey))
			if err == nil {
				existing = &old
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO waitpoints (`+waitpointColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, '', ?, ?, NULL, NULL)`,
			w.ID, w.Project, w.Env, w.RunID, w.Kind, w.Status, w.DisplayText, nullText(w.Schema),
			store.EncodeTags(w.Tags), nullText(w.IdempotencyKey), fmtTimePtr(w.TimeoutAt), w.CallbackHash,
			fmtTime(w.CreatedAt))
		return err
	})
	if err != nil {
		return waitpoints.Waitpoint{}, false, fmt.Errorf("create waitpoint: %w", err)
	}
	if existing != nil {
		return *existing, false, nil
	}
	return w, true, nil
}

// GetWaitpoint returns the waitpoint with id, or errdefs.ErrNotFound.
func (s *Store) GetWaitpoint(ctx context.Context, id string) (waitpoints.Waitpoint, error) {
	return getWaitpoint(ctx, s.r, id)
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getWaitpoint(ctx context.Context, q queryRower, id string) (waitpoints.Waitpoint, error) {
	w, err := scanWaitpoint(q.QueryRowContext(ctx, `SELECT `+waitpointColumns+` FROM waitpoints WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
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
			where = append(where, c.col+" = ?")
			args = append(args, c.val)
		}
	}
	if f.Tag != "" {
		where = append(where, "EXISTS (SELECT 1 FROM json_each(waitpoints.tags) WHERE json_each.value = ?)")
		args = append(args, f.Tag)
	}
	if f.Waited {
		where = append(where, "waited_at IS NOT NULL")
	}
	if f.Cursor != "" {
		t, id, err := store.DecodeCursor(f.Cursor)
		if err != nil {
			return waitpoints.Page{}, fmt.Errorf("list waitpoints: %w", err)
		}
		where = append(where, "(created_at, id) < (?, ?)")
		args = append(args, fmtTime(t), id)
	}
	q := `SELECT ` + waitpointColumns + ` FROM waitpoints`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC LIMIT ?"
	args = append(args, limit+1)
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
	rows, err := s.r.QueryContext(ctx, q, args...)
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

// ResolveWaitpoint moves a WAITING waitpoint to r.Status (see
// waitpoints.Store).
func (s *Store) ResolveWaitpoint(ctx context.Context, id string, r waitpoints.Resolution) (waitpoints.Waitpoint, bool, error) {
	var w waitpoints.Waitpoint
	var changed bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		if w, err = getWaitpoint(ctx, tx, id); err != nil {
			return err
		}
		if changed, err = store.CheckResolution(w, r); err != nil || !changed {
			return err
		}
		at := store.Time(r.Time)
		w.Status, w.Data, w.Reason, w.CompletedAt = r.Status, r.Data, r.Reason, &at
		_, err = tx.ExecContext(ctx, `UPDATE waitpoints SET status = ?, data = ?, reason = ?, completed_at = ?
			WHERE id = ?`, w.Status, nullText(w.Data), w.Reason, fmtTime(at), id)
		return err
	})
	if err != nil {
		return waitpoints.Waitpoint{}, false, fmt.Errorf("resolve waitpoint %s: %w", id, err)
	}
	return w, changed, nil
}

// MarkWaited sets the waitpoint's waited_at, once.
func (s *Store) MarkWaited(ctx context.Context, id string, at time.Time) (waitpoints.Waitpoint, error) {
	var w waitpoints.Waitpoint
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE waitpoints SET waited_at = COALESCE(waited_at, ?) WHERE id = ?`,
			fmtTime(at), id); err != nil {
			return err
		}
		var err error
		w, err = getWaitpoint(ctx, tx, id)
		return err
	})
	if err != nil {
		return waitpoints.Waitpoint{}, fmt.Errorf("mark waitpoint %s waited: %w", id, err)
	}
	return w, nil
}

// DueWaitpoints returns up to limit WAITING waitpoints due at now.
func (s *Store) DueWaitpoints(ctx context.Context, now time.Time, limit int) ([]waitpoints.Waitpoint, error) {
	out := []waitpoints.Waitpoint{}
	err := s.queryWaitpoints(ctx, `SELECT `+waitpointColumns+` FROM waitpoints
		WHERE status = 'WAITING' AND timeout_at IS NOT NULL AND timeout_at <= ?
		ORDER BY timeout_at, id LIMIT ?`, []any{fmtTime(now), max(limit, 1)}, &out)
	if err != nil {
		return nil, fmt.Errorf("due waitpoints: %w", err)
	}
	return out, nil
}
