package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/waitpoints"
)

const waitpointColumns = `id, project, env, run_id, kind, status, display_text, schema, tags,
	idempotency_key, timeout_at, data, reason, callback_hash, created_at, waited_at, completed_at`

func (db *DB) scanWaitpoint(row scanner) (waitpoints.Waitpoint, error) {
	var w waitpoints.Waitpoint
	err := row.Scan(&w.ID, &w.Project, &w.Env, &w.RunID, &w.Kind, &w.Status, &w.DisplayText, jsonCol{&w.Schema},
		db.d.TagsDest(&w.Tags), textCol{&w.IdempotencyKey}, nullTimeCol{&w.TimeoutAt}, jsonCol{&w.Data}, &w.Reason,
		&w.CallbackHash, timeCol{&w.CreatedAt}, nullTimeCol{&w.WaitedAt}, nullTimeCol{&w.CompletedAt})
	if err != nil {
		return waitpoints.Waitpoint{}, err
	}
	return w, nil
}

// CreateWaitpoint inserts w as WAITING, or returns the waitpoint that
// already holds w's idempotency key in its project and env (concurrent
// creators with one key get the same waitpoint).
func (db *DB) CreateWaitpoint(ctx context.Context, w waitpoints.Waitpoint) (waitpoints.Waitpoint, bool, error) {
	w = NewWaitpoint(w)
	created := true
	got := w
	err := db.write(ctx, func(tx txConn) error {
		n, err := tx.changed(ctx, `INSERT INTO waitpoints (`+waitpointColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, '', ?, ?, NULL, NULL)
			ON CONFLICT (project, env, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`,
			w.ID, w.Project, w.Env, w.RunID, w.Kind, w.Status, w.DisplayText, nullText(w.Schema),
			db.d.Tags(w.Tags), nullText(w.IdempotencyKey), w.TimeoutAt, w.CallbackHash, w.CreatedAt)
		if err != nil || n == 1 {
			return err
		}
		created = false
		got, err = db.scanWaitpoint(tx.queryRow(ctx, `SELECT `+waitpointColumns+` FROM waitpoints
			WHERE project = ? AND env = ? AND idempotency_key = ?`, w.Project, w.Env, w.IdempotencyKey))
		return err
	})
	if err != nil {
		return waitpoints.Waitpoint{}, false, fmt.Errorf("create waitpoint: %w", err)
	}
	return got, created, nil
}

// GetWaitpoint returns the waitpoint with id, or errdefs.ErrNotFound.
func (db *DB) GetWaitpoint(ctx context.Context, id string) (waitpoints.Waitpoint, error) {
	return db.getWaitpoint(ctx, db.read(), id, "")
}

func (db *DB) getWaitpoint(ctx context.Context, c conn, id, suffix string) (waitpoints.Waitpoint, error) {
	w, err := db.scanWaitpoint(c.queryRow(ctx, `SELECT `+waitpointColumns+` FROM waitpoints WHERE id = ?`+suffix, id))
	if err != nil {
		return waitpoints.Waitpoint{}, wrap(err, errdefs.ErrNotFound, "get waitpoint %s", id)
	}
	return w, nil
}

// ListWaitpoints returns waitpoints matching f, newest first, a page at a
// time.
func (db *DB) ListWaitpoints(ctx context.Context, f waitpoints.Filter) (waitpoints.Page, error) {
	limit := Limit(f.Limit, DefaultWaitpointsLimit, MaxWaitpointsLimit)
	var where []string
	var args []any
	for _, c := range []struct{ col, val string }{
		{"project", f.Project}, {"env", f.Env}, {"status", string(f.Status)}, {"run_id", f.RunID}, {"kind", string(f.Kind)},
	} {
		if c.val != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.val)
		}
	}
	if f.Tag != "" {
		where = append(where, db.d.HasTag)
		args = append(args, f.Tag)
	}
	if f.Waited {
		where = append(where, "waited_at IS NOT NULL")
	}
	if f.Cursor != "" {
		t, id, err := DecodeCursor(f.Cursor)
		if err != nil {
			return waitpoints.Page{}, fmt.Errorf("list waitpoints: %w", err)
		}
		where = append(where, "(created_at, id) < (?, ?)")
		args = append(args, t, id)
	}
	q := `SELECT ` + waitpointColumns + ` FROM waitpoints`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC LIMIT ?"
	rows, err := db.read().query(ctx, q, append(args, limit+1)...)
	list, err := scanAll(rows, err, db.scanWaitpoint)
	if err != nil {
		return waitpoints.Page{}, fmt.Errorf("list waitpoints: %w", err)
	}
	page := waitpoints.Page{Waitpoints: list}
	if len(page.Waitpoints) > limit {
		page.Waitpoints = page.Waitpoints[:limit]
		last := page.Waitpoints[limit-1]
		page.NextCursor = EncodeCursor(last.CreatedAt, last.ID)
	}
	return page, nil
}

// ResolveWaitpoint moves a WAITING waitpoint to r.Status, holding its row
// (see waitpoints.Store).
func (db *DB) ResolveWaitpoint(ctx context.Context, id string, r waitpoints.Resolution) (waitpoints.Waitpoint, bool, error) {
	var w waitpoints.Waitpoint
	var changed bool
	err := db.write(ctx, func(tx txConn) error {
		var err error
		if w, err = db.getWaitpoint(ctx, tx.conn, id, db.d.ForUpdate); err != nil {
			return err
		}
		if changed, err = CheckResolution(w, r); err != nil || !changed {
			return err
		}
		at := Time(r.Time)
		w.Status, w.Data, w.Reason, w.CompletedAt = r.Status, r.Data, r.Reason, &at
		_, err = tx.exec(ctx, `UPDATE waitpoints SET status = ?, data = ?, reason = ?, completed_at = ?
			WHERE id = ?`, w.Status, nullText(w.Data), w.Reason, at, id)
		return err
	})
	if err != nil {
		return waitpoints.Waitpoint{}, false, fmt.Errorf("resolve waitpoint %s: %w", id, err)
	}
	return w, changed, nil
}

// MarkWaited sets the waitpoint's waited_at, once.
func (db *DB) MarkWaited(ctx context.Context, id string, at time.Time) (waitpoints.Waitpoint, error) {
	w, err := db.scanWaitpoint(db.writer().queryRow(ctx, `UPDATE waitpoints SET waited_at = COALESCE(waited_at, ?)
		WHERE id = ? RETURNING `+waitpointColumns, Time(at), id))
	if err != nil {
		return waitpoints.Waitpoint{}, wrap(err, errdefs.ErrNotFound, "mark waitpoint %s waited", id)
	}
	return w, nil
}

// DueWaitpoints returns up to limit WAITING waitpoints due at now.
func (db *DB) DueWaitpoints(ctx context.Context, now time.Time, limit int) ([]waitpoints.Waitpoint, error) {
	rows, err := db.read().query(ctx, `SELECT `+waitpointColumns+` FROM waitpoints
		WHERE status = 'WAITING' AND timeout_at IS NOT NULL AND timeout_at <= ?
		ORDER BY timeout_at, id LIMIT ?`, now, max(limit, 1))
	out, err := scanAll(rows, err, db.scanWaitpoint)
	if err != nil {
		return nil, fmt.Errorf("due waitpoints: %w", err)
	}
	return out, nil
}
