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
	"github.com/helmr/helmr/internal/schedules"
)

// SchedulePrefix starts schedule ids.
const SchedulePrefix = "sched_"

// Schedule list page sizes.
const (
	DefaultSchedulesLimit = 50
	MaxSchedulesLimit     = 1000
)

const scheduleColumns = `id, project, env, task_id, type, cron, timezone, external_id, deduplication_key,
	active, deployment_version, next_run_at, last_run_at, last_run_id, last_error, pending_tick, pending_until,
	created_at, updated_at`

func scanSchedule(row scanner) (schedules.Schedule, error) {
	var s schedules.Schedule
	var active int
	err := row.Scan(&s.ID, &s.Project, &s.Env, &s.TaskID, &s.Type, &s.Cron, &s.Timezone, &s.ExternalID,
		textCol{&s.DeduplicationKey}, &active, &s.DeploymentVersion, nullTimeCol{&s.NextRunAt},
		nullTimeCol{&s.LastRunAt}, &s.LastRunID, &s.LastError, nullTimeCol{&s.PendingTick},
		nullTimeCol{&s.PendingUntil}, timeCol{&s.CreatedAt}, timeCol{&s.UpdatedAt})
	s.Active = active != 0
	return s, err
}

// orNull is t, or NULL for the zero time (a schedule with no next tick).
func orNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// CreateSchedule inserts s (see schedules.Store).
func (db *DB) CreateSchedule(ctx context.Context, s schedules.Schedule) (schedules.Schedule, error) {
	if s.ID == "" {
		s.ID = NewID(SchedulePrefix)
	}
	s.CreatedAt = Time(s.CreatedAt)
	if s.UpdatedAt.IsZero() {
		s.UpdatedAt = s.CreatedAt
	}
	s.UpdatedAt = Time(s.UpdatedAt)
	s.NextRunAt = TimePtr(s.NextRunAt)
	err := db.write(ctx, func(tx txConn) error { return insertSchedule(ctx, tx, s) })
	if err != nil {
		return schedules.Schedule{}, fmt.Errorf("create schedule: %w", err)
	}
	return s, nil
}

func insertSchedule(ctx context.Context, tx txConn, s schedules.Schedule) error {
	n, err := tx.changed(ctx, `INSERT INTO schedules (`+scheduleColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, '', '', NULL, NULL, ?, ?)
		ON CONFLICT DO NOTHING`,
		s.ID, s.Project, s.Env, s.TaskID, string(s.Type), s.Cron, s.Timezone, s.ExternalID, nullText(s.DeduplicationKey),
		boolInt(s.Active), s.DeploymentVersion, s.NextRunAt, s.CreatedAt, s.UpdatedAt)
	if err != nil {
		return err
	}
	if n == 0 {
		if s.Type == schedules.TypeDeclarative {
			return errdefs.Conflictf("task %q of %s/%s already has a declarative schedule", s.TaskID, s.Project, s.Env)
		}
		return errdefs.Conflictf("a schedule of %s/%s already holds deduplication key %q", s.Project, s.Env, s.DeduplicationKey)
	}
	return nil
}

// GetSchedule returns the schedule with id, or errdefs.ErrNotFound.
func (db *DB) GetSchedule(ctx context.Context, id string) (schedules.Schedule, error) {
	s, err := scanSchedule(db.read().queryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules WHERE id = ?`, id))
	if err != nil {
		return schedules.Schedule{}, wrap(err, errdefs.ErrNotFound, "get schedule %s", id)
	}
	return s, nil
}

// GetScheduleByKey returns the schedule holding a deduplication key.
func (db *DB) GetScheduleByKey(ctx context.Context, project, env, key string) (schedules.Schedule, error) {
	s, err := scanSchedule(db.read().queryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules
		WHERE project = ? AND env = ? AND deduplication_key = ?`, project, env, key))
	if err != nil {
		return schedules.Schedule{}, wrap(err, errdefs.ErrNotFound, "get schedule with deduplication key %q", key)
	}
	return s, nil
}

// ListSchedules returns schedules matching f, newest first, a page at a
// time.
func (db *DB) ListSchedules(ctx context.Context, f schedules.Filter) (schedules.Page, error) {
	limit := Limit(f.Limit, DefaultSchedulesLimit, MaxSchedulesLimit)
	var where []string
	var args []any
	for _, c := range []struct{ col, val string }{
		{"project", f.Project}, {"env", f.Env}, {"task_id", f.TaskID}, {"type", string(f.Type)},
	} {
		if c.val != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.val)
		}
	}
	if f.Cursor != "" {
		t, id, err := DecodeCursor(f.Cursor)
		if err != nil {
			return schedules.Page{}, fmt.Errorf("list schedules: %w", err)
		}
		where = append(where, "(created_at, id) < (?, ?)")
		args = append(args, t, id)
	}
	q := `SELECT ` + scheduleColumns + ` FROM schedules`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC LIMIT ?"
	rows, err := db.read().query(ctx, q, append(args, limit+1)...)
	list, err := scanAll(rows, err, scanSchedule)
	if err != nil {
		return schedules.Page{}, fmt.Errorf("list schedules: %w", err)
	}
	page := schedules.Page{Schedules: list}
	if len(list) > limit {
		page.Schedules = list[:limit]
		last := list[limit-1]
		page.NextCursor = EncodeCursor(last.CreatedAt, last.ID)
	}
	return page, nil
}

// UpdateSchedule changes schedule id with fn, holding its row (see
// schedules.Store).
func (db *DB) UpdateSchedule(ctx context.Context, id string, fn func(*schedules.Schedule) error) (schedules.Schedule, error) {
	var s schedules.Schedule
	err := db.write(ctx, func(tx txConn) error {
		var err error
		s, err = scanSchedule(tx.queryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules WHERE id = ?`+db.d.ForUpdate, id))
		if err != nil {
			return orMissing(err, errdefs.ErrNotFound)
		}
		if err := fn(&s); err != nil {
			return err
		}
		s.UpdatedAt = Time(s.UpdatedAt)
		s.NextRunAt = TimePtr(s.NextRunAt)
		return updateSchedule(ctx, tx, s)
	})
	if err != nil {
		return schedules.Schedule{}, fmt.Errorf("update schedule %s: %w", id, err)
	}
	return s, nil
}

func updateSchedule(ctx context.Context, tx txConn, s schedules.Schedule) error {
	n, err := tx.changed(ctx, `UPDATE schedules SET task_id = ?, cron = ?, timezone = ?, external_id = ?,
		deduplication_key = ?, active = ?, deployment_version = ?, next_run_at = ?, updated_at = ?
		WHERE id = ? AND NOT EXISTS (SELECT 1 FROM schedules o WHERE o.project = ? AND o.env = ?
			AND o.deduplication_key = ? AND o.id <> ?)`,
		s.TaskID, s.Cron, s.Timezone, s.ExternalID, nullText(s.DeduplicationKey), boolInt(s.Active),
		s.DeploymentVersion, s.NextRunAt, s.UpdatedAt, s.ID, s.Project, s.Env, s.DeduplicationKey, s.ID)
	if err == nil && n == 0 {
		err = errdefs.Conflictf("a schedule of %s/%s already holds deduplication key %q", s.Project, s.Env, s.DeduplicationKey)
	}
	return err
}

// DeleteSchedule removes schedule id.
func (db *DB) DeleteSchedule(ctx context.Context, id string) error {
	n, err := db.writer().changed(ctx, `DELETE FROM schedules WHERE id = ?`, id)
	if err == nil && n == 0 {
		err = errdefs.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete schedule %s: %w", id, err)
	}
	return nil
}

// DueSchedules returns schedules with a tick to fire at now.
func (db *DB) DueSchedules(ctx context.Context, now time.Time, limit int) ([]schedules.Schedule, error) {
	rows, err := db.read().query(ctx, `SELECT `+scheduleColumns+` FROM schedules
		WHERE (active = 1 AND next_run_at <= ? AND pending_tick IS NULL)
			OR (pending_tick IS NOT NULL AND pending_until <= ?)
		ORDER BY COALESCE(pending_tick, next_run_at), id LIMIT ?`, now, now, max(limit, 1))
	out, err := scanAll(rows, err, scanSchedule)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", err)
	}
	return out, nil
}

// NextTick returns the earliest next tick of the active schedules.
func (db *DB) NextTick(ctx context.Context) (*time.Time, error) {
	var t *time.Time
	err := db.read().queryRow(ctx, `SELECT MIN(next_run_at) FROM schedules WHERE active = 1`).Scan(nullTimeCol{&t})
	if err != nil {
		return nil, fmt.Errorf("next schedule tick: %w", err)
	}
	return t, nil
}

// ClaimTick claims a due tick with a compare-and-set on the schedule's
// next tick (see schedules.Store).
func (db *DB) ClaimTick(ctx context.Context, id string, c schedules.Claim) (schedules.Schedule, bool, error) {
	s, err := scanSchedule(db.writer().queryRow(ctx, `UPDATE schedules SET next_run_at = ?, pending_tick = ?, pending_until = ?
		WHERE id = ? AND active = 1 AND next_run_at = ? AND pending_tick IS NULL
		RETURNING `+scheduleColumns, orNull(c.Next), c.Tick, c.Until, id, c.Due))
	return tickResult(s, err, "claim tick of schedule %s", id)
}

// RetakeTick takes over a lapsed pending tick.
func (db *DB) RetakeTick(ctx context.Context, id string, tick, now, until time.Time) (schedules.Schedule, bool, error) {
	s, err := scanSchedule(db.writer().queryRow(ctx, `UPDATE schedules SET pending_until = ?
		WHERE id = ? AND pending_tick = ? AND pending_until <= ?
		RETURNING `+scheduleColumns, until, id, tick, now))
	return tickResult(s, err, "retake tick of schedule %s", id)
}

func tickResult(s schedules.Schedule, err error, what, id string) (schedules.Schedule, bool, error) {
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return schedules.Schedule{}, false, nil
		}
		return schedules.Schedule{}, false, fmt.Errorf(what+": %w", id, err)
	}
	return s, true, nil
}

// FinishTick records a claimed tick's outcome.
func (db *DB) FinishTick(ctx context.Context, id string, o schedules.Outcome) (bool, error) {
	n, err := db.writer().changed(ctx, `UPDATE schedules SET pending_tick = NULL, pending_until = NULL,
		last_run_at = pending_tick, last_run_id = ?, last_error = ?
		WHERE id = ? AND pending_tick = ?`, o.RunID, o.Error, id, o.Tick)
	if err != nil {
		return false, fmt.Errorf("finish tick of schedule %s: %w", id, err)
	}
	return n == 1, nil
}

// SyncDeclared reconciles project/env's declarative schedules with a
// deployment's (see schedules.Store). Syncs of one project env take turns.
func (db *DB) SyncDeclared(ctx context.Context, project, env string, version int, decls []schedules.Declared, now time.Time) (schedules.SyncResult, error) {
	var res schedules.SyncResult
	now = Time(now)
	err := db.write(ctx, func(tx txConn) error {
		res = schedules.SyncResult{}
		if err := tx.lock(ctx, "schedules", project+"/"+env); err != nil {
			return err
		}
		rows, err := tx.query(ctx, `SELECT `+scheduleColumns+` FROM schedules
			WHERE project = ? AND env = ? AND type = 'DECLARATIVE' ORDER BY task_id`+db.d.ForUpdate, project, env)
		have, err := scanAll(rows, err, scanSchedule)
		if err != nil {
			return err
		}
		byTask := map[string]schedules.Schedule{}
		for _, s := range have {
			if s.DeploymentVersion > version {
				res.Stale = true
				return nil
			}
			byTask[s.TaskID] = s
		}
		declared := map[string]bool{}
		for _, d := range decls {
			declared[d.TaskID] = true
			next := Time(d.Next)
			s, ok := byTask[d.TaskID]
			if !ok {
				s = schedules.Schedule{ID: NewID(SchedulePrefix), Project: project, Env: env, TaskID: d.TaskID,
					Type: schedules.TypeDeclarative, Cron: d.Cron, Timezone: d.Timezone, Active: true,
					DeploymentVersion: version, NextRunAt: &next, CreatedAt: now, UpdatedAt: now}
				if err := insertSchedule(ctx, tx, s); err != nil {
					return err
				}
				res.Created = append(res.Created, d.TaskID)
				continue
			}
			changed := s.Cron != d.Cron || s.Timezone != d.Timezone
			if !changed && s.DeploymentVersion == version {
				continue
			}
			if changed && s.Active {
				s.NextRunAt = &next
			}
			s.Cron, s.Timezone, s.DeploymentVersion, s.UpdatedAt = d.Cron, d.Timezone, version, now
			if err := updateSchedule(ctx, tx, s); err != nil {
				return err
			}
			if changed {
				res.Updated = append(res.Updated, d.TaskID)
			}
		}
		for _, s := range have {
			if declared[s.TaskID] {
				continue
			}
			if _, err := tx.exec(ctx, `DELETE FROM schedules WHERE id = ?`, s.ID); err != nil {
				return err
			}
			res.Deleted = append(res.Deleted, s.TaskID)
		}
		slices.Sort(res.Created)
		slices.Sort(res.Updated)
		slices.Sort(res.Deleted)
		return nil
	})
	if err != nil {
		return schedules.SyncResult{}, fmt.Errorf("sync the declared schedules of %s/%s: %w", project, env, err)
	}
	return res, nil
}
