package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/swerex"
	"github.com/helmr/helmr/internal/workspaces"
)

// workspaceService returns the workspaces, or 503 when this control plane
// keeps none.
func (s *Server) workspaceService() (*workspaces.Service, error) {
	if s.cfg.Workspaces == nil {
		return nil, errdefs.Unavailablef("this control plane keeps no workspaces")
	}
	return s.cfg.Workspaces, nil
}

func (s *Server) listWorkspaces(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.workspaceService()
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
	list, err := svc.List(r.Context(), project, env, limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"workspaces": list})
}

// createWorkspace makes an empty workspace for a deployed task's sandbox.
func (s *Server) createWorkspace(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.workspaceService()
	if err != nil {
		return err
	}
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	var req workspaces.CreateRequest
	if err := decodeJSON(w, r, 64<<10, &req); err != nil {
		return err
	}
	ws, err := svc.Create(r.Context(), project, env, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, ws)
}

func (s *Server) getWorkspace(w http.ResponseWriter, r *http.Request) error {
	_, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ws)
}

// requestWorkspace is the workspace a request addresses by id, if it is
// in the request's scope (else not found, as a missing one), and the
// service that holds it.
func (s *Server) requestWorkspace(r *http.Request) (*workspaces.Service, workspaces.Workspace, error) {
	svc, err := s.workspaceService()
	if err != nil {
		return nil, workspaces.Workspace{}, err
	}
	ws, err := svc.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, ws, err
	}
	return svc, ws, authorizeObject(r.Context(), ws.Project, ws.Env, fmt.Errorf("get workspace %s: %w", ws.ID, errdefs.ErrNotFound))
}

// deleteWorkspace marks a workspace deleted (204).
func (s *Server) deleteWorkspace(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	if err := svc.Delete(r.Context(), ws); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// execWorkspace runs one command in a workspace (a direct operation).
func (s *Server) execWorkspace(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	var req workspaces.ExecRequest
	if err := decodeJSON(w, r, workspaces.MaxStdinBytes+64<<10, &req); err != nil {
		return err
	}
	res, err := svc.Exec(r.Context(), ws, req, workspaces.Trace{Kind: "exec"})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// execWorkspaceStream is execWorkspace answering as server-sent events:
// an "output" event ({stream, data}) per line as the command prints it,
// then one "result" event (the ExecResult), or an "error" event. A
// request that cannot run is refused before the stream starts.
func (s *Server) execWorkspaceStream(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	var req workspaces.ExecRequest
	if err := decodeJSON(w, r, workspaces.MaxStdinBytes+64<<10, &req); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return errors.New("streaming unsupported")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	var mu sync.Mutex
	event := func(name string, v any) {
		data, _ := json.Marshal(v)
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
		flusher.Flush()
	}
	res, err := svc.Exec(r.Context(), ws, req, workspaces.Trace{Kind: "exec.stream", Output: func(stream string, data []byte) {
		event("output", workspaces.OpOutput{Stream: stream, Data: string(data)})
	}})
	if err != nil {
		he := toHTTP(err)
		event("error", map[string]any{"status": he.Status, "code": he.Code, "message": he.Message})
		return nil
	}
	event("result", res)
	return nil
}

// trajectory answers a workspace's operations, oldest first, from a
// cursor (after=SEQ).
func (s *Server) trajectory(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	after, err := afterParam(r) // a seq: any size, not a page size
	if err != nil {
		return err
	}
	limit, err := intParam(r, "limit", 1000)
	if err != nil {
		return err
	}
	ops, err := svc.Trajectory(r.Context(), ws, after, limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"workspaceId": ws.ID, "operations": ops})
}

// readWorkspaceFile streams a file's bytes.
func (s *Server) readWorkspaceFile(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	body := &lazyBody{w: w, ctype: "application/octet-stream", log: s.log}
	_, err = svc.ReadFile(r.Context(), ws, workspaces.Transfer{Path: r.URL.Query().Get("path")}, body)
	return body.finish(err)
}

// writeWorkspaceFile writes the body, streamed, to a file, making its
// directories.
func (s *Server) writeWorkspaceFile(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.workspaceUpload(r)
	if err != nil {
		return err
	}
	if _, err := svc.WriteFile(r.Context(), ws, workspaces.Transfer{Path: r.URL.Query().Get("path")}, r.Body); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listWorkspaceDir lists a directory (default: the workspace itself).
func (s *Server) listWorkspaceDir(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	dir, err := svc.ListDir(r.Context(), ws, r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, dir)
}

// downloadWorkspaceTar streams a tar of a directory of the workspace
// (default: all of it).
func (s *Server) downloadWorkspaceTar(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	body := &lazyBody{w: w, ctype: "application/x-tar", log: s.log}
	_, err = svc.DownloadTar(r.Context(), ws, workspaces.Transfer{Path: r.URL.Query().Get("path")}, body)
	return body.finish(err)
}

// uploadWorkspaceTar unpacks a tar (the body) into a directory of the
// workspace.
func (s *Server) uploadWorkspaceTar(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.workspaceUpload(r)
	if err != nil {
		return err
	}
	if _, err := svc.UploadTar(r.Context(), ws, workspaces.Transfer{Path: r.URL.Query().Get("path")}, r.Body); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// workspaceUpload is the workspace a file or tar upload addresses, found
// before the body is read (a workspace out of scope is not found,
// whatever is sent); a body that says it is larger than the service
// takes is refused at once.
func (s *Server) workspaceUpload(r *http.Request) (*workspaces.Service, workspaces.Workspace, error) {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return nil, ws, err
	}
	if r.ContentLength > workspaces.MaxStreamBytes {
		return nil, ws, errdefs.TooLargef("a file or tar sent through the API is at most %d bytes", workspaces.MaxStreamBytes)
	}
	return svc, ws, nil
}

// lazyBody is a streamed response that starts (200, its content type)
// with its first byte, so that an error found before any (a missing
// file) is answered as any other.
type lazyBody struct {
	w       http.ResponseWriter
	ctype   string
	log     *slog.Logger
	started bool
}

func (b *lazyBody) Write(p []byte) (int, error) {
	if !b.started {
		b.w.Header().Set("Content-Type", b.ctype)
		b.w.WriteHeader(http.StatusOK)
		b.started = true
	}
	return b.w.Write(p)
}

// finish ends the response after the stream: err as the API answers
// errors if nothing was sent yet; else, with an error, the connection is
// aborted, so that the client sees a broken response rather than a
// short one.
func (b *lazyBody) finish(err error) error {
	switch {
	case err == nil && !b.started:
		_, err = b.Write(nil)
		return err
	case err == nil:
		return nil
	case !b.started:
		return err
	}
	b.log.Warn("a streamed response broke off", "err", err)
	panic(http.ErrAbortHandler)
}

// swerex mounts a SWE-ReX endpoint (package swerex) on the workspace a
// request addresses, in its scope.
func (s *Server) swerex(h swerex.Handler) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		_, ws, err := s.requestWorkspace(r)
		if err != nil {
			return err
		}
		return h(w, r, ws)
	}
}
