package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/workers"
)

const runColumns = `id, project, env, task_id, deployment_id, deployment_version, status,
	payload, output, error, idempotency_key, worker_id, tier, max_duration_sec,
	need_cpu, need_memory, created_at, started_at, finished_at, last_seq, secrets,
	kind, need_digests, need_image, need_base_digest, workspace_id, need_host, replay_of,
	queue, concurrency_key, priority, tags, available_at, expires_at, attempt, retry, attempts, idempotency_expires_at,
	parent_id, root_id`

func scanRun(row scanner) (runs.Run, error) {
	var (
		r                runs.Run
		errJSON          json.RawMessage
		secrets, digests string
		tags, retry, att string
	)
	err := row.Scan(&r.ID, &r.Project, &r.Env, &r.TaskID, &r.DeploymentID, &r.DeploymentVersion, &r.Status,
		jsonCol{&r.Payload}, jsonCol{&r.Output}, jsonCol{&errJSON}, textCol{&r.IdempotencyKey}, &r.WorkerID, &r.Tier, &r.MaxDurationSec,
		&r.Needs.CPU, &r.Needs.MemoryBytes, timeCol{&r.CreatedAt}, nullTimeCol{&r.StartedAt}, nullTimeCol{&r.FinishedAt}, &r.LastSeq, &secrets,
		&r.Kind, &digests, &r.Needs.Image, &r.Needs.BaseDigest, &r.WorkspaceID, &r.Needs.Host, &r.ReplayOf,
		&r.Queue, &r.ConcurrencyKey, &r.Priority, &tags, nullTimeCol{&r.AvailableAt}, nullTimeCol{&r.ExpiresAt}, &r.Attempt, &retry, &att, nullTimeCol{&r.IdempotencyKeyExpiresAt},
		&r.ParentID, &r.RootID)
	if err != nil {
		return runs.Run{}, err
	}
	r.Tags = decodeTags(tags)
	if retry != "" {
		r.Retry = new(runs.RetryPolicy)
		if err := json.Unmarshal([]byte(retry), r.Retry); err != nil {
			return runs.Run{}, fmt.Errorf("decode retry policy of run %s: %w", r.ID, err)
		}
	}
	if att != "" {
		if err := json.Unmarshal([]byte(att), &r.Attempts); err != nil {
			return runs.Run{}, fmt.Errorf("decode attempts of run %s: %w", r.ID, err)
		}
	}
	if r.Secrets, err = DecodeBindings(r.ID, secrets); err != nil {
		return runs.Run{}, err
	}
	r.Needs.Digests = DecodeDigests(digests)
	if errJSON != nil {
		r.Error = new(runs.Error)
		if err := json.Unmarshal(errJSON, r.Error); err != nil {
			return runs.Run{}, fmt.Errorf("decode error of run %s: %w", r.ID, err)
		}
	}
	return r, nil
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
// ON CONFLICT DO NOTHING (for a run with a key: none of the others can
// conflict) waits for a concurrent insert of the same key, so the run it
// then reads is committed.
func (db *DB) CreateRun(ctx context.Context, r runs.Run) (runs.Run, bool, error) {
	if err := ValidateNeed(r.Needs); err != nil {
		return runs.Run{}, false, fmt.Errorf("create run: %w", err)
	}
	r, first := NewRun(r)
	retry, err := jsonText(r.Retry)
	if err != nil {
		return runs.Run{}, false, err
	}
	var existing *runs.Run
	err = db.write(ctx, func(tx txConn) error {
		if r.IdempotencyKey != "" {
			// A key past its ttl lets go of its run.
			if _, err := tx.exec(ctx, `UPDATE runs SET idempotency_key = NULL
				WHERE project = ? AND env = ? AND task_id = ? AND idempotency_key = ?
				AND idempotency_expires_at IS NOT NULL AND idempotency_expires_at <= ?`,
				r.Project, r.Env, r.TaskID, r.IdempotencyKey, r.CreatedAt); err != nil {
				return err
			}
		}
		q := `INSERT INTO runs (` + runColumns + `)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, '', '', ?, ?, ?, ?, NULL, NULL, 1, ?, ?, ?, ?, ?, ?, ?, ?,
			?, ?, ?, ?, ?, ?, 1, ?, '', ?, ?, ?)`
		if r.IdempotencyKey != "" {
			q += ` ON CONFLICT (project, env, task_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`
		}
		n, err := tx.changed(ctx, q,
			r.ID, r.Project, r.Env, r.TaskID, r.DeploymentID, r.DeploymentVersion, r.Status,
			nullText(r.Payload), nullText(r.IdempotencyKey), r.MaxDurationSec,
			r.Needs.CPU, r.Needs.MemoryBytes, r.CreatedAt, EncodeBindings(r.Secrets),
			r.Kind, EncodeDigests(r.Needs.Digests), r.Needs.Image, r.Needs.BaseDigest, r.WorkspaceID, r.Needs.Host, r.ReplayOf,
			r.Queue, r.ConcurrencyKey, r.Priority, encodeTags(r.Tags), TimePtr(r.AvailableAt), TimePtr(r.ExpiresAt), retry,
			TimePtr(r.IdempotencyKeyExpiresAt), r.ParentID, r.RootID)
		if err != nil {
			return err
		}
		if n == 0 {
			old, err := scanRun(tx.queryRow(ctx, `SELECT `+runColumns+` FROM runs
				WHERE project = ? AND env = ? AND task_id = ? AND idempotency_key = ?`,
				r.Project, r.Env, r.TaskID, r.IdempotencyKey))
			if err != nil {
				return fmt.Errorf("read run with idempotency key %q: %w", r.IdempotencyKey, err)
			}
			existing = &old
			return nil
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
func (db *DB) GetRun(ctx context.Context, id string) (runs.Run, error) {
	r, err := scanRun(db.read().queryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = ?`, id))
	if err != nil {
		return runs.Run{}, wrap(err, errdefs.ErrNotFound, "get run %s", id)
	}
	return r, nil
}

// ListRuns returns runs matching f, newest first, a page at a time.
func (db *DB) ListRuns(ctx context.Context, f runs.Filter) (runs.Page, error) {
	limit := Limit(f.Limit, DefaultRunsLimit, MaxRunsLimit)
	var where []string
	var args []any
	for _, c := range []struct{ col, val string }{
		{"project", f.Project}, {"env", f.Env}, {"task_id", f.TaskID}, {"status", string(f.Status)},
		{"kind", RunKind(f.Kind)}, {"workspace_id", f.WorkspaceID}, {"parent_id", f.ParentID},
	} {
		if c.val != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.val)
		}
	}
	if !f.Since.IsZero() {
		where = append(where, "created_at >= ?")
		args = append(args, f.Since)
	}
	if !f.Until.IsZero() {
		where = append(where, "created_at < ?")
		args = append(args, f.Until)
	}
	if f.Tag != "" {
		// Tags may hold "_", a LIKE wildcard: escaped, it matches itself.
		where = append(where, `tags LIKE ? ESCAPE '\'`)
		args = append(args, "%|"+strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(f.Tag)+"|%")
	}
	if f.Queue != "" {
		where = append(where, "queue = ?")
		args = append(args, f.Queue)
	}
	if f.IDPrefix != "" {
		where = append(where, "substr(id, 1, ?) = ?")
		args = append(args, len(f.IDPrefix), f.IDPrefix)
	}
	if f.Cursor != "" {
		t, id, err := DecodeCursor(f.Cursor)
		if err != nil {
			return runs.Page{}, fmt.Errorf("list runs: %w", err)
		}
		where = append(where, "(created_at, id) < (?, ?)")
		args = append(args, t, id)
	}
	q := `SELECT ` + runColumns + ` FROM runs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC LIMIT ?"
	rows, err := db.read().query(ctx, q, append(args, limit+1)...)
	list, err := scanAll(rows, err, scanRun)
	if err != nil {
		return runs.Page{}, fmt.Errorf("list runs: %w", err)
	}
	page := runs.Page{Runs: list}
	if len(page.Runs) > limit {
		page.Runs = page.Runs[:limit]
		last := page.Runs[limit-1]
		page.NextCursor = EncodeCursor(last.CreatedAt, last.ID)
	}
	return page, nil
}

// Transition applies t to the run with id, holding its row, and appends
// its status event.
func (db *DB) Transition(ctx context.Context, id string, t runs.Transition) (runs.Run, runs.Event, error) {
	if err := ValidateTransition(t); err != nil {
		return runs.Run{}, runs.Event{}, fmt.Errorf("transition run %s: %w", id, err)
	}
	var r runs.Run
	var ev runs.Event
	err := db.write(ctx, func(tx txConn) error {
		var err error
		r, err = scanRun(tx.queryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = ?`+db.d.ForUpdate, id))
		if err != nil {
			return wrap(err, errdefs.ErrNotFound, "transition run %s", id)
		}
		ev, err = applyTransition(ctx, tx, &r, t)
		return err
	})
	if err != nil {
		return runs.Run{}, runs.Event{}, err
	}
	return r, ev, nil
}

// applyTransition applies t to r (whose row tx holds), writes r back and
// appends the event.
func applyTransition(ctx context.Context, tx txConn, r *runs.Run, t runs.Transition) (runs.Event, error) {
	ev, err := ApplyTransition(r, t)
	if err != nil {
		return runs.Event{}, err
	}
	errJSON, err := errorJSON(r.Error)
	if err != nil {
		return runs.Event{}, err
	}
	attempts, err := jsonText(r.Attempts)
	if err != nil {
		return runs.Event{}, err
	}
	// A run holds a queue slot from its start until it ends, or until it
	// is parked (ReleaseSlot) while it waits.
	slot := "holds_slot"
	switch r.Status {
	case runs.StatusStarting, runs.StatusRunning:
		slot = "1"
	case runs.StatusWaiting:
	default:
		slot = "0"
	}
	_, err = tx.exec(ctx, `UPDATE runs SET status = ?, worker_id = ?, tier = ?, output = ?, error = ?,
		started_at = ?, finished_at = ?, last_seq = ?, attempt = ?, available_at = ?, attempts = ?, holds_slot = `+slot+` WHERE id = ?`,
		r.Status, r.WorkerID, r.Tier, nullText(r.Output), errJSON,
		r.StartedAt, r.FinishedAt, r.LastSeq, max(r.Attempt, 1), r.AvailableAt, attempts, r.ID)
	if err != nil {
		return runs.Event{}, fmt.Errorf("update run %s: %w", r.ID, err)
	}
	if err := insertEvents(ctx, tx, []runs.Event{ev}); err != nil {
		return runs.Event{}, err
	}
	return ev, nil
}

// LeaseRun moves the first QUEUED run that fits offer to STARTING for
// workerID: highest priority first, oldest first within a priority, among
// runs that are due (available_at) and whose queue has a free slot (see
// slotCheck). CPU and memory are checked on the queued index; the few
// runs that also need digests are checked against the offer here.
// Concurrent leasers pass over each other's rows (SKIP LOCKED), or take
// turns where one writer holds the database; a queue's slots are counted
// under a lock of the queue (and key), so replicas never overfill one.
func (db *DB) LeaseRun(ctx context.Context, workerID string, offer workers.Capabilities, now time.Time, envLimit int) (runs.Run, error) {
	var r runs.Run
	err := db.write(ctx, func(tx txConn) error {
		sc, err := newSlotCheck(ctx, tx, envLimit)
		if err != nil {
			return fmt.Errorf("lease run: %w", err)
		}
		skip, skipArgs := sc.exclusions()
		args := append([]any{offer.CPUs, offer.MemoryBytes, Time(now)}, skipArgs...)
		rows, err := tx.query(ctx, `SELECT `+runColumns+` FROM runs
			WHERE status = 'QUEUED' AND need_cpu <= ? AND need_memory <= ? AND (available_at IS NULL OR available_at <= ?)`+skip+`
			ORDER BY priority DESC, created_at, id LIMIT ?`+db.d.SkipLocked, append(args, LeaseCandidates)...)
		if err != nil {
			return fmt.Errorf("lease run: %w", err)
		}
		found := false
		for rows.Next() && !found {
			c, err := scanRun(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("lease run: %w", err)
			}
			if ok, _ := (workers.Worker{ID: workerID, Capabilities: offer}).Takes(c.Needs); ok && sc.take(c) {
				r, found = c, true
			}
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
func (db *DB) DropRunHost(ctx context.Context, id, host string) error {
	return db.write(ctx, func(tx txConn) error {
		var status, need string
		err := tx.queryRow(ctx, `SELECT status, need_host FROM runs WHERE id = ?`+db.d.ForUpdate, id).Scan(&status, &need)
		if err != nil {
			return wrap(err, errdefs.ErrNotFound, "drop the host of run %s", id)
		}
		if status != string(runs.StatusQueued) || need != host || host == "" {
			return fmt.Errorf("drop host %q of run %s: it is %s needing host %q: %w", host, id, status, need, errdefs.ErrConflict)
		}
		_, err = tx.exec(ctx, `UPDATE runs SET need_host = '' WHERE id = ?`, id)
		return err
	})
}

// jsonText is v as JSON text for a TEXT column: "" for nil or empty.
func jsonText(v any) (string, error) {
	switch x := v.(type) {
	case *runs.RetryPolicy:
		if x == nil {
			return "", nil
		}
	case []runs.Attempt:
		if len(x) == 0 {
			return "", nil
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", v, err)
	}
	return string(b), nil
}

// encodeTags stores tags as "|a|b|", so that a filter on one is a LIKE.
func encodeTags(tags []string) string {
	if len(tags) == 0 {
		return ""
	}
	return "|" + strings.Join(tags, "|") + "|"
}

func decodeTags(s string) []string {
	s = strings.Trim(s, "|")
	if s == "" {
		return nil
	}
	return strings.Split(s, "|")
}
