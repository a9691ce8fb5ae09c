package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store"
	"github.com/helmr/helmr/internal/workers"
)

const runColumns = `id, project, env, task_id, deployment_id, deployment_version, status,
	payload, output, error, idempotency_key, worker_id, tier, max_duration_sec,
	need_cpu, need_memory, created_at, started_at, finished_at, last_seq, secrets,
	kind, need_digests, need_image, need_base_digest, workspace_id, need_host`

func scanRun(row scanner) (runs.Run, error) {
	var (
		r                        runs.Run
		payload, output, errJSON *string
		key                      *string
		secrets, digests         string
	)
	err := row.Scan(&r.ID, &r.Project, &r.Env, &r.TaskID, &r.DeploymentID, &r.DeploymentVersion, &r.Status,
		&payload, &output, &errJSON, &key, &r.WorkerID, &r.Tier, &r.MaxDurationSec,
		&r.Needs.CPU, &r.Needs.MemoryBytes, &r.CreatedAt, &r.StartedAt, &r.FinishedAt, &r.LastSeq, &secrets,
		&r.Kind, &digests, &r.Needs.Image, &r.Needs.BaseDigest, &r.WorkspaceID, &r.Needs.Host)
	if err != nil {
		return runs.Run{}, err
	}
	if r.Secrets, err = store.DecodeBindings(r.ID, secrets); err != nil {
		return runs.Run{}, err
	}
	r.Needs.Digests = store.DecodeDigests(digests)
	if payload != nil {
		r.Payload = json.RawMessage(*payload)
	}
	if output != nil {
		r.Output = json.RawMessage(*output)
	}
	if errJSON != nil {
		r.Error = new(runs.Error)
		if err := json.Unmarshal([]byte(*errJSON), r.Error); err != nil {
			return runs.Run{}, fmt.Errorf("decode error of run %s: %w", r.ID, err)
		}
	}
	if key != nil {
		r.IdempotencyKey = *key
	}
	r.CreatedAt = r.CreatedAt.UTC()
	r.StartedAt, r.FinishedAt = utcPtr(r.StartedAt), utcPtr(r.FinishedAt)
	return r, nil
}

func errorJSON(e *runs.Error) (*string, error) {
	if e == nil {
		return nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode run error: %w", err)
	}
	return nullText(b), nil
}

// CreateRun inserts r as QUEUED with its first status event, or returns the
// run that already holds r's idempotency key for its project, env and task.
// ON CONFLICT DO NOTHING waits for a concurrent insert of the same key, so
// the run it then reads is committed.
func (s *Store) CreateRun(ctx context.Context, r runs.Run) (runs.Run, bool, error) {
	if err := store.ValidateNeed(r.Needs); err != nil {
		return runs.Run{}, false, fmt.Errorf("create run: %w", err)
	}
	r, first := store.NewRun(r)
	var existing *runs.Run
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO runs (`+runColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, NULL, $9, '', '', $10, $11, $12, $13, NULL, NULL, 1, $14, $15, $16, $17, $18, $19, $20)
			ON CONFLICT (project, env, task_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`,
			r.ID, r.Project, r.Env, r.TaskID, r.DeploymentID, r.DeploymentVersion, r.Status,
			nullText(r.Payload), nullText(r.IdempotencyKey), r.MaxDurationSec,
			r.Needs.CPU, r.Needs.MemoryBytes, r.CreatedAt, store.EncodeBindings(r.Secrets),
			r.Kind, store.EncodeDigests(r.Needs.Digests), r.Needs.Image, r.Needs.BaseDigest, r.WorkspaceID, r.Needs.Host)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			old, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs
				WHERE project = $1 AND env = $2 AND task_id = $3 AND idempotency_key = $4`,
				r.Project, r.Env, r.TaskID, r.IdempotencyKey))
			if err != nil {
				return fmt.Errorf("read run with idempotency key %q: %w", r.IdempotencyKey, err)
			}
			existing = &old
			return nil
		}
		return insertEvents(ctx, tx, r.ID, []runs.Event{first})
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
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1`, id))
	if isNoRows(err) {
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
			args = append(args, c.val)
			where = append(where, fmt.Sprintf("%s = $%d", c.col, len(args)))
		}
	}
	if f.Cursor != "" {
		t, id, err := store.DecodeCursor(f.Cursor)
		if err != nil {
			return runs.Page{}, fmt.Errorf("list runs: %w", err)
		}
		args = append(args, t, id)
		where = append(where, fmt.Sprintf("(created_at, id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	q := `SELECT ` + runColumns + ` FROM runs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, limit+1)
	q += fmt.Sprintf(" ORDER BY created_at DESC, id DESC LIMIT $%d", len(args))
	rows, err := s.pool.Query(ctx, q, args...)
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

// Transition applies t to the run with id, holding its row lock, and
// appends the status event.
func (s *Store) Transition(ctx context.Context, id string, t runs.Transition) (runs.Run, runs.Event, error) {
	if err := store.ValidateTransition(t); err != nil {
		return runs.Run{}, runs.Event{}, fmt.Errorf("transition run %s: %w", id, err)
	}
	var r runs.Run
	var ev runs.Event
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		r, err = scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 FOR UPDATE`, id))
		if isNoRows(err) {
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

// applyTransition applies t to r (whose row tx holds locked), writes r back
// and appends the event.
func applyTransition(ctx context.Context, tx pgx.Tx, r *runs.Run, t runs.Transition) (runs.Event, error) {
	ev, err := store.ApplyTransition(r, t)
	if err != nil {
		return runs.Event{}, err
	}
	errJSON, err := errorJSON(r.Error)
	if err != nil {
		return runs.Event{}, err
	}
	_, err = tx.Exec(ctx, `UPDATE runs SET status = $1, worker_id = $2, tier = $3, output = $4, error = $5,
		started_at = $6, finished_at = $7, last_seq = $8 WHERE id = $9`,
		r.Status, r.WorkerID, r.Tier, nullText(r.Output), errJSON,
		r.StartedAt, r.FinishedAt, r.LastSeq, r.ID)
	if err != nil {
		return runs.Event{}, fmt.Errorf("update run %s: %w", r.ID, err)
	}
	if err := insertEvents(ctx, tx, r.ID, []runs.Event{ev}); err != nil {
		return runs.Event{}, err
	}
	return ev, nil
}

// LeaseRun moves the oldest QUEUED run that fits offer to STARTING for
// workerID. CPU and memory are checked on the queued index; the few runs
// that also need digests are checked against the offer here. SKIP LOCKED
// lets concurrent leasers pass over rows another one is taking.
func (s *Store) LeaseRun(ctx context.Context, workerID string, offer workers.Capabilities, now time.Time) (runs.Run, error) {
	var r runs.Run
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+runColumns+` FROM runs
			WHERE status = 'QUEUED' AND need_cpu <= $1 AND need_memory <= $2
			ORDER BY created_at, id LIMIT $3 FOR UPDATE SKIP LOCKED`, offer.CPUs, offer.MemoryBytes, store.LeaseCandidates)
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
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var status, need string
		err := tx.QueryRow(ctx, `SELECT status, need_host FROM runs WHERE id = $1 FOR UPDATE`, id).Scan(&status, &need)
		if isNoRows(err) {
			return fmt.Errorf("drop the host of run %s: %w", id, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("drop the host of run %s: %w", id, err)
		}
		if status != string(runs.StatusQueued) || need != host || host == "" {
			return fmt.Errorf("drop host %q of run %s: it is %s needing host %q: %w", host, id, status, need, errdefs.ErrConflict)
		}
		_, err = tx.Exec(ctx, `UPDATE runs SET need_host = '' WHERE id = $1`, id)
		return err
	})
}
