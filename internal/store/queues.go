package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// slotCheck is what a lease knows of queue slots: the queues that are
// paused or limited, and how many slots each queue (and concurrency
// key) and each project environment holds.
type slotCheck struct {
	envLimit int
	queues   map[[3]string]runs.Queue // paused or limited queues by project, env, name
	used     map[[4]string]int        // held slots by project, env, queue, key
	envUsed  map[[2]string]int        // held slots of task runs by project, env
	locked   bool
}

func newSlotCheck(ctx context.Context, tx txConn, envLimit int) (*slotCheck, error) {
	sc := &slotCheck{envLimit: envLimit, queues: map[[3]string]runs.Queue{}, used: map[[4]string]int{}, envUsed: map[[2]string]int{}}
	rows, err := tx.query(ctx, `SELECT project, env, name, concurrency_limit, paused FROM queues WHERE paused <> 0 OR concurrency_limit > 0`)
	qs, err := scanAll(rows, err, scanQueue)
	if err != nil {
		return nil, err
	}
	for _, q := range qs {
		sc.queues[[3]string{q.Project, q.Env, q.Name}] = q
	}
	if len(sc.queues) == 0 && envLimit <= 0 {
		return sc, nil
	}
	rows, err = tx.query(ctx, `SELECT project, env, queue, concurrency_key, COUNT(*) FROM runs
		WHERE holds_slot = 1 AND queue <> '' GROUP BY project, env, queue, concurrency_key`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var k [4]string
		var n int
		if err := rows.Scan(&k[0], &k[1], &k[2], &k[3], &n); err != nil {
			return nil, err
		}
		sc.used[k] += n
		sc.envUsed[[2]string{k[0], k[1]}] += n
	}
	return sc, rows.Err()
}

// exclusions is the SQL (and its arguments) that leaves out runs whose
// queue is paused or full, or whose environment is at its limit.
func (sc *slotCheck) exclusions() (string, []any) {
	var b strings.Builder
	var args []any
	for k, q := range sc.queues {
		if q.Paused {
			b.WriteString(" AND NOT (project = ? AND env = ? AND queue = ?)")
			args = append(args, k[0], k[1], k[2])
		}
	}
	for k, n := range sc.used {
		if q, ok := sc.queues[[3]string{k[0], k[1], k[2]}]; ok && !q.Paused && q.ConcurrencyLimit > 0 && n >= q.ConcurrencyLimit {
			b.WriteString(" AND NOT (project = ? AND env = ? AND queue = ? AND concurrency_key = ?)")
			args = append(args, k[0], k[1], k[2], k[3])
		}
	}
	if sc.envLimit > 0 {
		for k, n := range sc.envUsed {
			if n >= sc.envLimit {
				b.WriteString(" AND NOT (project = ? AND env = ? AND queue <> '')")
				args = append(args, k[0], k[1])
			}
		}
	}
	return b.String(), args
}

// take reports whether run c may start now: its queue is not paused and
// has a slot free for its concurrency key, and its environment is under
// its limit. Counts are read again under one lock that every leaser
// takes when limits are in play, so concurrent leases never overfill.
func (sc *slotCheck) take(ctx context.Context, tx txConn, c runs.Run) (bool, error) {
	if c.Queue == "" {
		return true, nil // a build run: no queue
	}
	q, limited := sc.queues[[3]string{c.Project, c.Env, c.Queue}]
	if limited && q.Paused {
		return false, nil
	}
	if (!limited || q.ConcurrencyLimit <= 0) && sc.envLimit <= 0 {
		return true, nil
	}
	if !sc.locked {
		if err := tx.lock(ctx, "run_slots", ""); err != nil {
			return false, err
		}
		sc.locked = true
	}
	if limited && q.ConcurrencyLimit > 0 {
		var n int
		if err := tx.queryRow(ctx, `SELECT COUNT(*) FROM runs WHERE holds_slot = 1 AND project = ? AND env = ? AND queue = ? AND concurrency_key = ?`,
			c.Project, c.Env, c.Queue, c.ConcurrencyKey).Scan(&n); err != nil {
			return false, err
		}
		if n >= q.ConcurrencyLimit {
			return false, nil
		}
	}
	if sc.envLimit > 0 {
		var n int
		if err := tx.queryRow(ctx, `SELECT COUNT(*) FROM runs WHERE holds_slot = 1 AND project = ? AND env = ? AND queue <> ''`,
			c.Project, c.Env).Scan(&n); err != nil {
			return false, err
		}
		if n >= sc.envLimit {
			return false, nil
		}
	}
	return true, nil
}

func scanQueue(row scanner) (runs.Queue, error) {
	var q runs.Queue
	var paused int
	err := row.Scan(&q.Project, &q.Env, &q.Name, &q.ConcurrencyLimit, &paused)
	q.Paused = paused != 0
	return q, err
}

// DeclareQueue implements runs.Store: it sets a queue's limit (a
// deployment declares it), keeping whether it is paused.
func (db *DB) DeclareQueue(ctx context.Context, q runs.Queue) error {
	_, err := db.writer().exec(ctx, `INSERT INTO queues (project, env, name, concurrency_limit, paused) VALUES (?, ?, ?, ?, 0)
		ON CONFLICT (project, env, name) DO UPDATE SET concurrency_limit = excluded.concurrency_limit`,
		q.Project, q.Env, q.Name, q.ConcurrencyLimit)
	if err != nil {
		return fmt.Errorf("declare queue %s: %w", q.Name, err)
	}
	return nil
}

// PauseQueue implements runs.Store.
func (db *DB) PauseQueue(ctx context.Context, project, env, name string, paused bool) (runs.Queue, error) {
	p := 0
	if paused {
		p = 1
	}
	_, err := db.writer().exec(ctx, `INSERT INTO queues (project, env, name, concurrency_limit, paused) VALUES (?, ?, ?, 0, ?)
		ON CONFLICT (project, env, name) DO UPDATE SET paused = excluded.paused`, project, env, name, p)
	if err != nil {
		return runs.Queue{}, fmt.Errorf("pause queue %s: %w", name, err)
	}
	return db.GetQueue(ctx, project, env, name)
}

// GetQueue implements runs.Store: a queue with its counts; a queue no run
// and no declaration names is errdefs.ErrNotFound.
func (db *DB) GetQueue(ctx context.Context, project, env, name string) (runs.Queue, error) {
	qs, err := db.listQueues(ctx, project, env, name)
	if err != nil {
		return runs.Queue{}, err
	}
	if len(qs) == 0 {
		return runs.Queue{}, fmt.Errorf("queue %s in %s/%s: %w", name, project, env, errdefs.ErrNotFound)
	}
	return qs[0], nil
}

// ListQueues implements runs.Store: the queues of a project environment
// (declared, or named by a queued or started run), by name.
func (db *DB) ListQueues(ctx context.Context, project, env string) ([]runs.Queue, error) {
	return db.listQueues(ctx, project, env, "")
}

func (db *DB) listQueues(ctx context.Context, project, env, name string) ([]runs.Queue, error) {
	filter, args := "", []any{project, env}
	if name != "" {
		filter = " AND name = ?"
		args = append(args, name)
	}
	rows, err := db.read().query(ctx, `SELECT project, env, name, concurrency_limit, paused FROM queues WHERE project = ? AND env = ?`+filter, args...)
	declared, err := scanAll(rows, err, scanQueue)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	byName := map[string]*runs.Queue{}
	var out []runs.Queue
	for _, q := range declared {
		out = append(out, q)
	}
	for i := range out {
		byName[out[i].Name] = &out[i]
	}
	args = []any{project, env}
	qfilter := ""
	if name != "" {
		qfilter = " AND queue = ?"
		args = append(args, name)
	}
	rows, err = db.read().query(ctx, `SELECT queue, SUM(CASE WHEN status = 'QUEUED' THEN 1 ELSE 0 END), SUM(holds_slot)
		FROM runs WHERE project = ? AND env = ? AND queue <> '' AND (status = 'QUEUED' OR holds_slot = 1)`+qfilter+` GROUP BY queue`, args...)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	defer rows.Close()
	var extra []runs.Queue
	for rows.Next() {
		var n string
		var queued, running sql.NullInt64
		if err := rows.Scan(&n, &queued, &running); err != nil {
			return nil, err
		}
		if q := byName[n]; q != nil {
			q.Queued, q.Running = int(queued.Int64), int(running.Int64)
			continue
		}
		extra = append(extra, runs.Queue{Project: project, Env: env, Name: n, Queued: int(queued.Int64), Running: int(running.Int64)})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out = append(out, extra...)
	slices.SortFunc(out, func(a, b runs.Queue) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ReleaseSlot implements runs.Store: a WAITING run whose sandbox was
// parked holds no queue slot.
func (db *DB) ReleaseSlot(ctx context.Context, id string) error {
	n, err := db.writer().changed(ctx, `UPDATE runs SET holds_slot = 0 WHERE id = ? AND status = 'WAITING'`, id)
	if err != nil {
		return fmt.Errorf("release the slot of run %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("release the slot of run %s: it is not waiting: %w", id, errdefs.ErrConflict)
	}
	return nil
}

// ExpireRuns implements runs.Store: every QUEUED run whose ttl ran out by
// now ends EXPIRED, with its status event.
func (db *DB) ExpireRuns(ctx context.Context, now time.Time) ([]runs.Run, error) {
	rows, err := db.read().query(ctx, `SELECT id FROM runs WHERE status = 'QUEUED' AND expires_at IS NOT NULL AND expires_at <= ? LIMIT 500`, Time(now))
	ids, err := scanAll(rows, err, func(row scanner) (string, error) {
		var id string
		return id, row.Scan(&id)
	})
	if err != nil {
		return nil, fmt.Errorf("expire runs: %w", err)
	}
	var out []runs.Run
	for _, id := range ids {
		r, _, err := db.Transition(ctx, id, runs.Transition{From: []runs.Status{runs.StatusQueued}, To: runs.StatusExpired, FinishedAt: &now, Time: now,
			Error: &runs.Error{Class: runs.ClassCanceled, Message: "expired: not started before its ttl"}})
		if errors.Is(err, errdefs.ErrConflict) {
			continue // leased or canceled meanwhile
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// BecameDue implements runs.Store.
func (db *DB) BecameDue(ctx context.Context, since, until time.Time) (bool, error) {
	var n int
	err := db.read().queryRow(ctx, `SELECT COUNT(*) FROM runs WHERE status = 'QUEUED' AND available_at > ? AND available_at <= ?`,
		Time(since), Time(until)).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("runs that became due: %w", err)
	}
	return n > 0, nil
}
