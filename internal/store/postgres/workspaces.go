package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/store"
	"github.com/helmr/helmr/internal/workspaces"
)

const workspaceColumns = `id, project, env, task_id, sandbox, quota_bytes, host, last_run_id, created_at, used_at, deleted_at,
	snapshot_seq, snapshot_blob, snapshot_size, snapshot_at`

func scanWorkspace(row scanner) (workspaces.Workspace, error) {
	var (
		w      workspaces.Workspace
		snap   workspaces.Snapshot
		snapAt *time.Time
	)
	if err := row.Scan(&w.ID, &w.Project, &w.Env, &w.TaskID, &w.Sandbox, &w.QuotaBytes, &w.Host, &w.LastRunID, &w.CreatedAt, &w.UsedAt, &w.DeletedAt,
		&snap.Seq, &snap.BlobID, &snap.Size, &snapAt); err != nil {
		return workspaces.Workspace{}, err
	}
	w.CreatedAt = w.CreatedAt.UTC()
	w.UsedAt, w.DeletedAt = utcPtr(w.UsedAt), utcPtr(w.DeletedAt)
	if snap.Seq > 0 {
		if snapAt != nil {
			snap.CreatedAt = snapAt.UTC()
		}
		w.Snapshot = &snap
	}
	return w, nil
}

// CreateWorkspace stores w.
func (s *Store) CreateWorkspace(ctx context.Context, w workspaces.Workspace) (workspaces.Workspace, error) {
	w, err := store.NewWorkspace(w)
	if err != nil {
		return workspaces.Workspace{}, err
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO workspaces (id, project, env, task_id, sandbox, quota_bytes, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		w.ID, w.Project, w.Env, w.TaskID, w.Sandbox, w.QuotaBytes, w.CreatedAt); err != nil {
		return workspaces.Workspace{}, fmt.Errorf("create workspace: %w", err)
	}
	return w, nil
}

// GetWorkspace returns the workspace with id.
func (s *Store) GetWorkspace(ctx context.Context, id string) (workspaces.Workspace, error) {
	w, err := scanWorkspace(s.pool.QueryRow(ctx, `SELECT `+workspaceColumns+` FROM workspaces WHERE id = $1`, id))
	if isNoRows(err) {
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
	rows, err := s.pool.Query(ctx, `SELECT `+workspaceColumns+` FROM workspaces
		WHERE project = $1 AND env = $2 AND deleted_at IS NULL ORDER BY created_at DESC, id DESC LIMIT $3`, project, env, limit)
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
	return s.updateWorkspace(ctx, id, `UPDATE workspaces SET last_run_id = $1, host = $2, used_at = $3 WHERE id = $4`,
		runID, host, store.Time(at), id)
}

// DeleteWorkspace marks the workspace deleted (the first deletion's time stays).
func (s *Store) DeleteWorkspace(ctx context.Context, id string, at time.Time) error {
	return s.updateWorkspace(ctx, id, `UPDATE workspaces SET deleted_at = COALESCE(deleted_at, $1) WHERE id = $2`, store.Time(at), id)
}

func (s *Store) updateWorkspace(ctx context.Context, id, q string, args ...any) error {
	tag, err := s.pool.Exec(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("update workspace %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("update workspace %s: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

// DeletedWorkspaces returns which of ids are deleted or unknown.
func (s *Store) DeletedWorkspaces(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT id FROM workspaces WHERE deleted_at IS NULL AND id = ANY($1)`, ids)
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
	rows, err := s.pool.Query(ctx, `SELECT id FROM workspaces WHERE deleted_at IS NULL AND host <> '' AND host <> $1 AND id = ANY($2) ORDER BY id`, host, ids)
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
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		w, err := scanWorkspace(tx.QueryRow(ctx, `SELECT `+workspaceColumns+` FROM workspaces WHERE id = $1 FOR UPDATE`, id))
		if isNoRows(err) {
			return errdefs.ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := store.CheckSnapshot(w, host, snap); err != nil {
			return err
		}
		prev = w.Snapshot
		_, err = tx.Exec(ctx, `UPDATE workspaces SET snapshot_seq = $1, snapshot_blob = $2, snapshot_size = $3, snapshot_at = $4 WHERE id = $5`,
			snap.Seq, snap.BlobID, snap.Size, snap.CreatedAt, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("record snapshot %d of workspace %s: %w", snap.Seq, id, err)
	}
	return prev, nil
}

// AppendOp stores rec as the workspace's next operation. The insert picks
// the next number itself; a concurrent append of the same workspace that
// collides on it is retried.
func (s *Store) AppendOp(ctx context.Context, rec workspaces.OpRecord) (workspaces.OpRecord, error) {
	rec.StartedAt = store.Time(rec.StartedAt)
	var result *string
	if len(rec.Result) > 0 {
		r := string(rec.Result)
		result = &r
	}
	var err error
	for range 5 {
		err = s.pool.QueryRow(ctx, `INSERT INTO workspace_ops (workspace_id, seq, kind, request, result, error, started_at, duration_ms)
			SELECT $1, COALESCE(MAX(seq), 0) + 1, $2, $3, $4, $5, $6, $7 FROM workspace_ops WHERE workspace_id = $1
			RETURNING seq`, rec.WorkspaceID, rec.Kind, string(rec.Request), result, rec.Error, rec.StartedAt, rec.DurationMs).Scan(&rec.Seq)
		if err == nil || !isUniqueViolation(err) {
			break
		}
	}
	if err != nil {
		return workspaces.OpRecord{}, fmt.Errorf("record an operation of workspace %s: %w", rec.WorkspaceID, err)
	}
	return rec, nil
}

// ListOps returns the workspace's operations after seq, oldest first.
func (s *Store) ListOps(ctx context.Context, workspaceID string, after int64, limit int) ([]workspaces.OpRecord, error) {
	limit = store.Limit(limit, store.DefaultEventsLimit, store.MaxEventsLimit)
	rows, err := s.pool.Query(ctx, `SELECT workspace_id, seq, kind, request, result, error, started_at, duration_ms
		FROM workspace_ops WHERE workspace_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, workspaceID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list operations of workspace %s: %w", workspaceID, err)
	}
	defer rows.Close()
	out := []workspaces.OpRecord{}
	for rows.Next() {
		var (
			rec     workspaces.OpRecord
			request string
			result  *string
		)
		if err := rows.Scan(&rec.WorkspaceID, &rec.Seq, &rec.Kind, &request, &result, &rec.Error, &rec.StartedAt, &rec.DurationMs); err != nil {
			return nil, fmt.Errorf("list operations of workspace %s: %w", workspaceID, err)
		}
		rec.Request = json.RawMessage(request)
		if result != nil {
			rec.Result = json.RawMessage(*result)
		}
		rec.StartedAt = rec.StartedAt.UTC()
		out = append(out, rec)
	}
	return out, rows.Err()
}

// isUniqueViolation reports a unique constraint violation (SQLSTATE 23505).
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
