// Package swerex serves a SWE-ReX remote runtime per workspace, at
// /v1/swerex/{id}: the routes, request and response shapes of SWE-ReX's
// server (swerex/server.py and swerex/runtime/abstract.py, swe-rex 1.4),
// so SWE-ReX's RemoteRuntime, and SWE-agent through it, drive a Helmr
// workspace unmodified: RemoteRuntime(host="http://CONTROL_PLANE/v1/swerex/ws_…",
// auth_token=API_KEY). Commands run as direct operations on the workspace
// (workspaces.Service). Errors SWE-ReX raises travel as its server sends
// them: 511 with {"swerexception": {message, class_path, traceback,
// extra_info}}; a request its schema refuses is a 422.
//
// The control plane's router mounts the endpoints (API's methods) on its
// routes, after it found the workspace a request addresses and checked
// the caller may use it.
package swerex

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// Workspaces is what the API asks of the workspaces service
// (workspaces.Service): direct operations and shell sessions, validated,
// recorded in the workspace's trajectory as tr says.
type Workspaces interface {
	Exec(ctx context.Context, ws workspaces.Workspace, req workspaces.ExecRequest, tr workspaces.Trace) (workspaces.ExecResult, error)
	Shell(ctx context.Context, ws workspaces.Workspace, req workspaces.ShellRequest, tr workspaces.Trace) (workspaces.ShellResult, error)
}

// Handler is a SWE-ReX endpoint on workspace ws, which the caller found
// and authorized. It answers SWE-ReX's own errors itself and returns
// Helmr's (errdefs kinds: a deleted workspace, no worker) for the caller
// to answer as the rest of its API does.
type Handler func(w http.ResponseWriter, r *http.Request, ws workspaces.Workspace) error

// API is the SWE-ReX remote runtime of every workspace. It keeps nothing
// a request needs but its replay cache (sessions live in the sandboxes).
type API struct {
	ws      Workspaces
	replies *replayCache
}

// New returns the SWE-ReX API over the workspaces of ws.
func New(ws Workspaces) *API {
	return &API{ws: ws, replies: newReplayCache(replayBytes, replayAge)}
}

// swerexError is an exception SWE-ReX's client re-raises.
type swerexError struct {
	class, message string
}

func (e *swerexError) Error() string { return e.message }

// withInfo is a swerexError with the extra_info its exception carries.
type withInfo struct {
	err   *swerexError
	extra map[string]any
}

func (e *withInfo) Error() string { return e.err.message }
func (e *withInfo) Unwrap() error { return e.err }

// schemaError is a request SWE-ReX's schema refuses: a 422, as its server
// (FastAPI) answers.
type schemaError struct {
	message string
}

func (e *schemaError) Error() string { return e.message }

// endpoint is a SWE-ReX endpoint's logic: its answer, or an error.
type endpoint func(r *http.Request, ws workspaces.Workspace) (any, error)

// IsAlive answers GET is_alive.
func (a *API) IsAlive(w http.ResponseWriter, r *http.Request, ws workspaces.Workspace) error {
	return a.serve(w, r, ws, a.isAlive, false)
}

// CreateSession answers POST create_session.
func (a *API) CreateSession(w http.ResponseWriter, r *http.Request, ws workspaces.Workspace) error {
	return a.serve(w, r, ws, a.createSession, true)
}

// RunInSession answers POST run_in_session.
func (a *API) RunInSession(w http.ResponseWriter, r *http.Request, ws workspaces.Workspace) error {
	return a.serve(w, r, ws, a.runInSession, true)
}

// CloseSession answers POST close_session.
func (a *API) CloseSession(w http.ResponseWriter, r *http.Request, ws workspaces.Workspace) error {
	return a.serve(w, r, ws, a.closeSession, true)
}

// Execute answers POST execute.
func (a *API) Execute(w http.ResponseWriter, r *http.Request, ws workspaces.Workspace) error {
	return a.serve(w, r, ws, a.execute, true)
}

// ReadFile answers POST read_file.
func (a *API) ReadFile(w http.ResponseWriter, r *http.Request, ws workspaces.Workspace) error {
	return a.serve(w, r, ws, a.readFile, false)
}

// WriteFile answers POST write_file.
func (a *API) WriteFile(w http.ResponseWriter, r *http.Request, ws workspaces.Workspace) error {
	return a.serve(w, r, ws, a.writeFile, true)
}

// Upload answers POST upload.
func (a *API) Upload(w http.ResponseWriter, r *http.Request, ws workspaces.Workspace) error {
	return a.serve(w, r, ws, a.upload, true)
}

// Close answers POST close.
func (a *API) Close(w http.ResponseWriter, r *http.Request, ws workspaces.Workspace) error {
	return a.serve(w, r, ws, a.close, true)
}

// serve runs an endpoint in SWE-ReX's error shapes, answering a retry
// (the X-Request-ID of a request answered before) with the answer kept
// for it, if the endpoint is one that changes something (replay); reads
// simply run again.
func (a *API) serve(w http.ResponseWriter, r *http.Request, ws workspaces.Workspace, h endpoint, replay bool) error {
	key := ""
	if id := r.Header.Get("X-Request-ID"); id != "" && replay {
		key = ws.ID + "\x00" + id
		if rep, ok := a.replies.get(key); ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rep.status)
			_, err := w.Write(rep.body)
			return err
		}
	}
	out, err := h(r, ws)
	status := http.StatusOK
	var se *swerexError
	var ve *schemaError
	switch {
	case errors.As(err, &se):
		status = 511
		extra := map[string]any{}
		if wi := (*withInfo)(nil); errors.As(err, &wi) {
			extra = wi.extra
		}
		out = map[string]any{"swerexception": map[string]any{
			"message": se.message, "class_path": se.class, "traceback": "", "extra_info": extra,
		}}
	case errors.As(err, &ve):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		return json.NewEncoder(w).Encode(map[string]any{"detail": ve.message, "error": map[string]any{"code": "invalid_request", "message": ve.message}})
	case err != nil:
		return err // Helmr's own errors (not found, conflict, no worker) as the rest of the API sends them
	}
	body, err := json.Marshal(out)
	if err != nil {
		return err
	}
	if key != "" {
		a.replies.put(key, reply{status: status, body: body})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(body)
	return err
}

// decode reads a SWE-ReX request model, with its defaults already in v.
func decode(r *http.Request, v any) error {
	const max = 2 * workspaces.MaxFileBytes // a write_file's content, JSON-escaped
	data, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return errdefs.Invalidf("read the request body: %v", err)
	}
	if len(data) > max {
		return errdefs.TooLargef("a request body is at most %d bytes", max)
	}
	if len(bytes.TrimSpace(data)) == 0 || string(bytes.TrimSpace(data)) == "null" {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return &schemaError{"the body does not match the SWE-ReX request: " + err.Error()}
	}
	return nil
}

func (a *API) isAlive(_ *http.Request, ws workspaces.Workspace) (any, error) {
	if ws.DeletedAt != nil {
		return map[string]any{"is_alive": false, "message": "workspace " + ws.ID + " was deleted"}, nil
	}
	return map[string]any{"is_alive": true, "message": ""}, nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pyRepr renders s roughly as Python's repr does, for messages that
// mirror SWE-ReX's.
func pyRepr(s string) string {
	q, _ := json.Marshal(s)
	return "'" + strings.ReplaceAll(strings.Trim(string(q), `"`), "'", `\'`) + "'"
}
