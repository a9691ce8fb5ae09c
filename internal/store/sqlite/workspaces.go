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
	"github.com/helmr/helmr/internal/workspaces"
)

const workspaceColumns = `id, project, env, task_id, sandbox, quota_bytes, host, last_run_id, created_at, used_at, deleted_at,
	snapshot_seq, snapshot_blob, snapshot_size, snapshot_at`

func scanWorkspace(row scanner) (workspaces.Workspace, error) {
	var (
		w                     workspaces.Workspace
		created               string
		used, deleted, snapAt sql.NullString
		snap                  workspaces.Snapshot
		errs                  [4]error
	)
	if err := row.Scan(&w.ID, &w.Project, &w.Env, &w.TaskID, &w.Sandbox, &w.QuotaBytes, &w.Host, &w.LastRunID, &created, &used, &deleted,
		&snap.Seq, &snap.BlobID, &snap.Size, &snapAt); err != nil {
		return workspaces.Workspace{}, err
	}
	w.CreatedAt, errs[0] = parseTime(created)
	w.UsedAt, errs[1] = parseTimePtr(used)
	w.DeletedAt, errs[2] = parseTimePtr(deleted)
	if snap.Seq > 0 {
		var at *time.Time
		at, errs[3] = parseTimePtr(snapAt)
		if at != nil {
			snap.CreatedAt = *at
		}
		w.Snapshot = &snap
	}
	return w, errors.Join(errs[:]...)
}

// CreateWorkspace stores w.
func (s *Store) CreateWorkspace(ctx context.Context, w workspaces.Workspace) (workspaces.Workspace, error) {
	w, err := store.NewWorkspace(w)
	if err != nil {
		return workspaces.Workspace{}, err
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO workspaces (id, project, env, task_id, sandbox, quota_bytes, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			w.ID, w.Project, w.Env, w.TaskID, w.Sandbox, w.QuotaBytes, fmtTime(w.CreatedAt))
		return err
	})
	if err != nil {
		return workspaces.Workspace{}, fmt.Errorf("create workspace: %w", err)
	}
	return w, nil
}

// GetWorkspace returns the workspace with id.
func (s *Store) GetWorkspace(ctx context.Context, id string) (workspaces.Workspace, error) {
	w, err := scanWorkspace(s.r.QueryRowContext(ctx, `SELECT `+workspaceColumns+` FROM workspaces WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return workspaces.Workspace{}, fmt.Errorf("get workspace %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return workspaces.Workspace{}, fmt.Errorf("get workspace %s: %w", id, err)
	}
	return w, nil
}

// ListWorkspaces returns the live workspaces of project/env, newest first.
func (s *Store) ListWorkspaces(ctx context.Context, project, env string, limit int) ([]workspaces.Workspace, error) {
	limit = store.Limit(limit, store.DefaultWorkspacesLimit, store.MaxWorkspacesLimit)
	rows, err := s.r.QueryContext(ctx, `SELECT `+workspaceColumns+` FROM workspaces
		WHERE project = ? AND env = ? AND deleted_at IS NULL ORDER BY created_at DESC, id DESC LIMIT ?`, project, env, limit)
	if err != nil {
		return nil, fmt.Errorf("list workspaces of %s/%s: %w", project, env, err)
	}
	defer rows.Close()
	out := []workspaces.Workspace{}
	for rows.Next() {
		w, err := scanWorkspace(rows)
		if err != nil {
			return nil, fmt.Errorf("list workspaces of %s/%s: %w", project, env, err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list workspaces of %s/%s: %w", project, env, err)
	}
	return out, nil
}

// UseWorkspace records a run of the workspace on a host.
func (s *Store) UseWorkspace(ctx context.Context, id, runID, host string, at time.Time) error {
	return s.updateWorkspace(ctx, id, `UPDATE workspaces SET last_run_id = ?, host = ?, used_at = ? WHERE id = ?`,
		runID, host, fmtTime(at), id)
}

// DeleteWorkspace marks the workspace deleted (the first deletion's time stays).
func (s *Store) DeleteWorkspace(ctx context.Context, id string, at time.Time) error {
	return s.updateWorkspace(ctx, id, `UPDATE workspaces SET deleted_at = COALESCE(deleted_at, ?) WHERE id = ?`, fmtTime(at), id)
}

func (s *Store) updateWorkspace(ctx context.Context, id, q string, args ...any) error {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("update workspace %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("update workspace %s: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

// DeletedWorkspaces returns which of ids are deleted or unknown.
func (s *Store) DeletedWorkspaces(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM workspaces WHERE deleted_at IS NULL AND id IN (?`+
		strings.Repeat(", ?", len(ids)-1)+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("deleted workspaces: %w", err)
	}
	defer rows.Close()
	return store.Gone(ids, rows)
}

// MovedWorkspaces returns which of ids are live and held by a host other
// than host.
func (s *Store) MovedWorkspaces(ctx context.Context, host string, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := []any{host}
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM workspaces WHERE deleted_at IS NULL AND host <> '' AND host <> ? AND id IN (?`+
		strings.Repeat(", ?", len(ids)-1)+`) ORDER BY id`, args...)
	if err != nil {
		return nil, fmt.Errorf("moved workspaces: %w", err)
	}
	defer rows.Close()
	return store.IDs(rows)
}

// RecordSnapshot makes snap the workspace's latest snapshot if the
// workspace is live, on host, and at snapshot snap.Seq-1.
func (s *Store) RecordSnapshot(ctx context.Context, id, host string, snap workspaces.Snapshot) (*workspaces.Snapshot, error) {
	snap.CreatedAt = store.Time(snap.CreatedAt)
	var prev *workspaces.Snapshot
	err := s.write(ctx, func(tx *sql.Tx) error {
		w, err := scanWorkspace(tx.QueryRowContext(ctx, `SELECT `+workspaceColumns+` FROM workspaces WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return errdefs.ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := store.CheckSnapshot(w, host, snap); err != nil {
			return err
		}
		prev = w.Snapshot
		_, err = tx.ExecContext(ctx, `UPDATE workspaces SET snapshot_seq = ?, snapshot_blob = ?, snapshot_size = ?, snapshot_at = ? WHERE id = ?`,
			snap.Seq, snap.BlobID, snap.Size, fmtTime(snap.CreatedAt), id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("record snapshot %d of workspace %s: %w", snap.Seq, id, err)
	}
	return prev, nil
}

// AppendOp stores rec as the workspace's next operation.
func (s *Store) AppendOp(ctx context.Context, rec workspaces.OpRecord) (workspaces.OpRecord, error) {
	rec.StartedAt = store.Time(rec.StartedAt)
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM workspace_ops WHERE workspace_id = ?`, rec.WorkspaceID).Scan(&rec.Seq); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO workspace_ops (workspace_id, seq, kind, request, result, error, started_at, duration_ms)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, rec.WorkspaceID, rec.Seq, rec.Kind, string(rec.Request), nullText(rec.Result), rec.Error,
			fmtTime(rec.StartedAt), rec.DurationMs)
		return err
	})
	if err != nil {
		return workspaces.OpRecord{}, fmt.Errorf("record an operation of workspace %s: %w", rec.WorkspaceID, err)
	}
	return rec, nil
}

// ListOps returns the workspace's operations after seq, oldest first.
func (s *Store) ListOps(ctx context.Context, workspaceID string, after int64, limit int) ([]workspaces.OpRecord, error) {
	limit = store.Limit(limit, store.DefaultEventsLimit, store.MaxEventsLimit)
	rows, err := s.r.QueryContext(ctx, `SELECT workspace_id, seq, kind, request, result, error, started_at, duration_ms
		FROM workspace_ops WHERE workspace_id = ? AND seq > ? ORDER BY seq LIMIT ?`, workspaceID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list operations of workspace %s: %w", workspaceID, err)
	}
	defer rows.Close()
	out := []workspaces.OpRecord{}
	for rows.Next() {
		var (
			rec              workspaces.OpRecord
			request, started string
			result           sql.NullString
		)
		if err := rows.Scan(&rec.WorkspaceID, &rec.Seq, &rec.Kind, &request, &result, &rec.Error, &started, &rec.DurationMs); err != nil {
			return nil, fmt.Errorf("list operations of workspace %s: %w", workspaceID, err)
		}
		rec.Request = json.RawMessage(request)
		if result.Valid {
			rec.Result = json.RawMessage(result.String)
		}
		if rec.StartedAt, err = parseTime(started); err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}
