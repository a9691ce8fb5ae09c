package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/workspaces"
)

// workspaceStore returns the workspaces, or 503 when this control plane
// keeps none.
func (s *Server) workspaceStore() (workspaces.Store, error) {
	if s.cfg.Workspaces == nil {
		return nil, &Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "this control plane keeps no workspaces"}
	}
	return s.cfg.Workspaces, nil
}

func (s *Server) listWorkspaces(w http.ResponseWriter, r *http.Request) error {
	st, err := s.workspaceStore()
	if err != nil {
		return err
	}
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	limit, err := intParam(r, "limit", 50)
	if err != nil {
		return err
	}
	list, err := st.ListWorkspaces(r.Context(), project, env, limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"workspaces": list})
}

func (s *Server) getWorkspace(w http.ResponseWriter, r *http.Request) error {
	st, err := s.workspaceStore()
	if err != nil {
		return err
	}
	ws, err := visibleWorkspace(r, st)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ws)
}

// visibleWorkspace is the workspace a request addresses by id, if it is
// in the request's scope (else not found, as a missing one).
func visibleWorkspace(r *http.Request, st workspaces.Store) (workspaces.Workspace, error) {
	ws, err := st.GetWorkspace(r.Context(), r.PathValue("id"))
	if err != nil {
		return workspaces.Workspace{}, err
	}
	if err := authorize(r.Context(), ws.Project, ws.Env); err != nil {
		return workspaces.Workspace{}, hidden(err, fmt.Errorf("get workspace %s: %w", ws.ID, workspaces.ErrNotFound))
	}
	return ws, nil
}

// deleteWorkspace marks a workspace deleted: no run may attach to it
// again, and the worker holding its files removes them. A workspace an
// unfinished run holds cannot be deleted.
func (s *Server) deleteWorkspace(w http.ResponseWriter, r *http.Request) error {
	st, err := s.workspaceStore()
	if err != nil {
		return err
	}
	ws, err := visibleWorkspace(r, st)
	if err != nil {
		return err
	}
	page, err := s.cfg.Runs.List(r.Context(), runs.Filter{Project: ws.Project, Env: ws.Env, WorkspaceID: ws.ID, Limit: 1})
	if err != nil {
		return err
	}
	if len(page.Runs) > 0 && !page.Runs[0].Status.Terminal() {
		return &Error{Status: http.StatusConflict, Code: "conflict", Message: "workspace " + ws.ID + " is in use by run " + page.Runs[0].ID + ": cancel it or wait for it to finish"}
	}
	if err := st.DeleteWorkspace(r.Context(), ws.ID, time.Now()); err != nil {
		return err
	}
	s.log.Info("workspace deleted", "workspace_id", ws.ID, "project", ws.Project, "env", ws.Env)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
