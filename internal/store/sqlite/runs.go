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
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store"
	"github.com/helmr/helmr/internal/workers"
)

const runColumns = `id, project, env, task_id, deployment_id, deployment_version, status,
	payload, output, error, idempotency_key, worker_id, tier, max_duration_sec,
	need_cpu, need_memory, created_at, started_at, finished_at, last_seq, secrets,
	kind, need_digests, need_image, need_base_digest, workspace_id, need_host`

type scanner interface{ Scan(dest ...any) error }

func scanRun(row scanner) (runs.Run, error) {
	var (
		r                         runs.Run
		payload, output, errJSON  sql.NullString
		key, started, finished    sql.NullString
		created, secrets, digests string
	)
	err := row.Scan(&r.ID, &r.Project, &r.Env, &r.TaskID, &r.DeploymentID, &r.DeploymentVersion, &r.Status,
		&payload, &output, &errJSON, &key, &r.WorkerID, &r.Tier, &r.MaxDurationSec,
		&r.Needs.CPU, &r.Needs.MemoryBytes, &created, &started, &finished, &r.LastSeq, &secrets,
		&r.Kind, &digests, &r.Needs.Image, &r.Needs.BaseDigest, &r.WorkspaceID, &r.Needs.Host)
	if err != nil {
		return runs.Run{}, err
	}
	if r.Secrets, err = store.DecodeBindings(r.ID, secrets); err != nil {
		return runs.Run{}, err
	}
	r.Needs.Digests = store.DecodeDigests(digests)
	if payload.Valid {
		r.Payload = json.RawMessage(payload.String)
	}
	if output.Valid {
		r.Output = json.RawMessage(output.String)
	}
	if errJSON.Valid {
		r.Error = new(runs.Error)
		if err := json.Unmarshal([]byte(errJSON.String), r.Error); err != nil {
			return runs.Run{}, fmt.Errorf("decode error of run %s: %w", r.ID, err)
		}
	}
	r.IdempotencyKey = key.String
	var errs [3]error
	r.CreatedAt, errs[0] = parseTime(created)
	r.StartedAt, errs[1] = parseTimePtr(started)
	r.FinishedAt, errs[2] = parseTimePtr(finished)
	return r, errors.Join(errs[:]...)
}

func errorJSON(e *runs.Error) (any, error) {
	if e == nil {
		return nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode run error: %w", err)
	}
	return string(b), nil
}

// CreateRun inserts r as QUEUED with its first status event, or returns the
// run that already holds r's idempotency key for its project, env and task.
func (s *Store) CreateRun(ctx context.Context, r runs.Run) (runs.Run, bool, error) {
	if err := store.ValidateNeed(r.Needs); err != nil {
		return runs.Run{}, false, fmt.Errorf("create run: %w", err)
	}
	r, first := store.NewRun(r)
	var existing *runs.Run
	err := s.write(ctx, func(tx *sql.Tx) error {
		if r.IdempotencyKey != "" {
			row := tx.QueryRowContext(ctx, `SELECT `+runColumns+` FROM runs
				WHERE project = ? AND env = ? AND task_id = ? AND idempotency_key = ?`,
				r.Project, r.Env, r.TaskID, r.IdempotencyKey)
			old, err := scanRun(row)
			if err == nil {
				existing = &old
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO runs (`+runColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, '', '', ?, ?, ?, ?, NULL, NULL, 1, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.Project, r.Env, r.TaskID, r.DeploymentID, r.DeploymentVersion, r.Status,
			nullText(r.Payload), nullText(r.IdempotencyKey), r.MaxDurationSec,
			r.Needs.CPU, r.Needs.MemoryBytes, fmtTime(r.CreatedAt), store.EncodeBindings(r.Secrets),
			r.Kind, store.EncodeDigests(r.Needs.Digests), r.Needs.Image, r.Needs.BaseDigest, r.WorkspaceID, r.Needs.Host)
		if err != nil {
			return err
		}
		return insertEvents(ctx, tx, []runs.Event{first})
	})
	if err != nil {
		return runs.Run{}, false, fmt.Errorf("create run: %w", err)
	}
	if existing != nil {
		return *existing, false, nil
	}
	return r, true, nil
}

// GetRun returns the run with id, or errdefs.ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id string) (runs.Run, error) {
	r, err := scanRun(s.r.QueryRowContext(ctx, `SELECT `+runColumns+` FROM runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return runs.Run{}, fmt.Errorf("get run %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return runs.Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	return r, nil
}

// ListRuns returns runs matching f, newest first, a page at a time.
func (s *Store) ListRuns(ctx context.Context, f runs.Filter) (runs.Page, error) {
	limit := store.Limit(f.Limit, store.DefaultRunsLimit, store.MaxRunsLimit)
	var where []string
	var args []any
	for _, c := range []struct{ col, val string }{
		{"project", f.Project}, {"env", f.Env}, {"task_id", f.TaskID}, {"status", string(f.Status)},
		{"kind", store.RunKind(f.Kind)}, {"workspace_id", f.WorkspaceID},
	} {
		if c.val != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.val)
		}
	}
	if f.Cursor != "" {
		t, id, err := store.DecodeCursor(f.Cursor)
		if err != nil {
			return runs.Page{}, fmt.Errorf("list runs: %w", err)
		}
		where = append(where, "(created_at, id) < (?, ?)")
		args = append(args, fmtTime(t), id)
	}
	q := `SELECT ` + runColumns + ` FROM runs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC LIMIT ?"
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return runs.Page{}, fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	page := runs.Page{Runs: []runs.Run{}}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return runs.Page{}, fmt.Errorf("list runs: %w", err)
		}
		page.Runs = append(page.Runs, r)
	}
	if err := rows.Err(); err != nil {
		return runs.Page{}, fmt.Errorf("list runs: %w", err)
	}
	if len(page.Runs) > limit {
		page.Runs = page.Runs[:limit]
		last := page.Runs[limit-1]
		page.NextCursor = store.EncodeCursor(last.CreatedAt, last.ID)
	}
	return page, nil
}

// Transition applies t to the run with id and appends its status event.
func (s *Store) Transition(ctx context.Context, id string, t runs.Transition) (runs.Run, runs.Event, error) {
	if err := store.ValidateTransition(t); err != nil {
		return runs.Run{}, runs.Event{}, fmt.Errorf("transition run %s: %w", id, err)
	}
	var r runs.Run
	var ev runs.Event
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		r, err = scanRun(tx.QueryRowContext(ctx, `SELECT `+runColumns+` FROM runs WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("transition run %s: %w", id, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("transition run %s: %w", id, err)
		}
		ev, err = applyTransition(ctx, tx, &r, t)
		return err
	})
	if err != nil {
		return runs.Run{}, runs.Event{}, err
	}
	return r, ev, nil
}

// applyTransition applies t to r, writes r back and appends the event.
func applyTransition(ctx context.Context, tx *sql.Tx, r *runs.Run, t runs.Transition) (runs.Event, error) {
	ev, err := store.ApplyTransition(r, t)
	if err != nil {
		return runs.Event{}, err
	}
	errJSON, err := errorJSON(r.Error)
	if err != nil {
		return runs.Event{}, err
	}
	_, err = tx.ExecContext(ctx, `UPDATE runs SET status = ?, worker_id = ?, tier = ?, output = ?, error = ?,
		started_at = ?, finished_at = ?, last_seq = ? WHERE id = ?`,
		r.Status, r.WorkerID, r.Tier, nullText(r.Output), errJSON,
		fmtTimePtr(r.StartedAt), fmtTimePtr(r.FinishedAt), r.LastSeq, r.ID)
	if err != nil {
		return runs.Event{}, fmt.Errorf("update run %s: %w", r.ID, err)
	}
	if err := insertEvents(ctx, tx, []runs.Event{ev}); err != nil {
		return runs.Event{}, err
	}
	return ev, nil
}

// LeaseRun moves the oldest QUEUED run that fits offer to STARTING for
// workerID. CPU and memory are checked on the queued index; the few runs
// that also need digests are checked against the offer here. The single
// IMMEDIATE writer makes concurrent leases exclusive.
func (s *Store) LeaseRun(ctx context.Context, workerID string, offer workers.Capabilities, now time.Time) (runs.Run, error) {
	var r runs.Run
	err := s.write(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+runColumns+` FROM runs
			WHERE status = 'QUEUED' AND need_cpu <= ? AND need_memory <= ?
			ORDER BY created_at, id LIMIT ?`, offer.CPUs, offer.MemoryBytes, store.LeaseCandidates)
		if err != nil {
			return fmt.Errorf("lease run: %w", err)
		}
		found := false
		for rows.Next() && !found {
			if r, err = scanRun(rows); err != nil {
				rows.Close()
				return fmt.Errorf("lease run: %w", err)
			}
			found, _ = workers.Worker{ID: workerID, Capabilities: offer}.Takes(r.Needs)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lease run: %w", err)
		}
		if !found {
			return fmt.Errorf("lease run for worker %s: no queued run fits %g vCPUs, %d bytes: %w",
				workerID, offer.CPUs, offer.MemoryBytes, errdefs.ErrNotFound)
		}
		_, err = applyTransition(ctx, tx, &r, runs.Transition{
			From: []runs.Status{runs.StatusQueued}, To: runs.StatusStarting, WorkerID: workerID, Time: now,
		})
		return err
	})
	if err != nil {
		return runs.Run{}, err
	}
	return r, nil
}

// DropRunHost clears the host requirement of a QUEUED run that still
// needs host.
func (s *Store) DropRunHost(ctx context.Context, id, host string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		var status, need string
		err := tx.QueryRowContext(ctx, `SELECT status, need_host FROM runs WHERE id = ?`, id).Scan(&status, &need)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("drop the host of run %s: %w", id, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("drop the host of run %s: %w", id, err)
		}
		if status != string(runs.StatusQueued) || need != host || host == "" {
			return fmt.Errorf("drop host %q of run %s: it is %s needing host %q: %w", host, id, status, need, errdefs.ErrConflict)
		}
		_, err = tx.ExecContext(ctx, `UPDATE runs SET need_host = '' WHERE id = ?`, id)
		return err
	})
}
