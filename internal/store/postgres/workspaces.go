package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/store"
	"github.com/helmr/helmr/internal/workspaces"
)

const workspaceColumns = `id, project, env, task_id, host, last_run_id, created_at, used_at, deleted_at`

func scanWorkspace(row scanner) (workspaces.Workspace, error) {
	var w workspaces.Workspace
	if err := row.Scan(&w.ID, &w.Project, &w.Env, &w.TaskID, &w.Host, &w.LastRunID, &w.CreatedAt, &w.UsedAt, &w.DeletedAt); err != nil {
		return workspaces.Workspace{}, err
	}
	w.CreatedAt = w.CreatedAt.UTC()
	w.UsedAt, w.DeletedAt = utcPtr(w.UsedAt), utcPtr(w.DeletedAt)
	return w, nil
}

// CreateWorkspace stores w.
func (s *Store) CreateWorkspace(ctx context.Context, w workspaces.Workspace) (workspaces.Workspace, error) {
	w, err := store.NewWorkspace(w)
	if err != nil {
		return workspaces.Workspace{}, err
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO workspaces (id, project, env, task_id, created_at) VALUES ($1, $2, $3, $4, $5)`,
		w.ID, w.Project, w.Env, w.TaskID, w.CreatedAt); err != nil {
		return workspaces.Workspace{}, fmt.Errorf("create workspace: %w", err)
	}
	return w, nil
}

// GetWorkspace returns the workspace with id.
func (s *Store) GetWorkspace(ctx context.Context, id string) (workspaces.Workspace, error) {
	w, err := scanWorkspace(s.pool.QueryRow(ctx, `SELECT `+workspaceColumns+` FROM workspaces WHERE id = $1`, id))
	if isNoRows(err) {
		return workspaces.Workspace{}, fmt.Errorf("get workspace %s: %w", id, workspaces.ErrNotFound)
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
		return fmt.Errorf("update workspace %s: %w", id, workspaces.ErrNotFound)
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
