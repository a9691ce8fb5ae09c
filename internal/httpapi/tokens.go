package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/waitpoints"
)

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	TimeoutSeconds float64  `json:"timeoutSeconds,omitempty"`
	IdempotencyKey string   `json:"idempotencyKey,omitempty"`
	Tags           []string `json:"tags,omitempty"`
}

// CompleteRequest is the body of POST /v1/tokens/{id}/complete and
// POST /v1/runs/{id}/approve.
type CompleteRequest struct {
	Data json.RawMessage `json:"data"`
}

// CancelRequest is the body of POST /v1/tokens/{id}/cancel and
// POST /v1/runs/{id}/reject (optional).
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

func (s *Server) waits() (*waitpoints.Service, error) {
	if s.cfg.Waits == nil {
		return nil, errdefs.Unavailablef("waitpoints are not enabled on this server")
	}
	return s.cfg.Waits, nil
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.waits()
	if err != nil {
		return err
	}
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	var req CreateTokenRequest
	if err := decodeOptionalJSON(w, r, 64<<10, &req); err != nil {
		return err
	}
	key := req.IdempotencyKey
	if h := r.Header.Get("Idempotency-Key"); h != "" {
		if key != "" && key != h {
			return errdefs.Invalidf("the Idempotency-Key header and body field differ")
		}
		key = h
	}
	wp, created, err := ws.Create(r.Context(), waitpoints.CreateRequest{Project: project, Env: env, Kind: waitpoints.KindToken,
		TimeoutSeconds: req.TimeoutSeconds, IdempotencyKey: key, Tags: req.Tags})
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	return writeJSON(w, status, wp)
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.waits()
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
	q := r.URL.Query()
	if q.Has("status") && !waitpoints.Status(q.Get("status")).Valid() {
		return errdefs.Invalidf("unknown status %q (one of WAITING, COMPLETED, TIMED_OUT, CANCELED)", q.Get("status"))
	}
	if q.Has("kind") && !waitpoints.Kind(q.Get("kind")).Valid() {
		return errdefs.Invalidf("unknown kind %q (one of human, token, timer, runs)", q.Get("kind"))
	}
	page, err := ws.List(r.Context(), waitpoints.Filter{Project: project, Env: env, Status: waitpoints.Status(q.Get("status")),
		RunID: q.Get("run"), Tag: q.Get("tag"), Kind: waitpoints.Kind(q.Get("kind")), Limit: limit, Cursor: q.Get("cursor")})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, page)
}

func (s *Server) getToken(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.waits()
	if err != nil {
		return err
	}
	wp, err := s.visibleWaitpoint(r, ws)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wp)
}

// visibleWaitpoint is the waitpoint a request addresses by id, if it is in
// the request's scope (else not found, as a missing one).
func (s *Server) visibleWaitpoint(r *http.Request, ws *waitpoints.Service) (waitpoints.Waitpoint, error) {
	wp, err := ws.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return waitpoints.Waitpoint{}, err
	}
	if err := authorizeObject(r.Context(), wp.Project, wp.Env, fmt.Errorf("get waitpoint %s: %w", wp.ID, errdefs.ErrNotFound)); err != nil {
		return waitpoints.Waitpoint{}, err
	}
	return wp, nil
}

func (s *Server) completeToken(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.waits()
	if err != nil {
		return err
	}
	if _, err := s.visibleWaitpoint(r, ws); err != nil {
		return err
	}
	var req CompleteRequest
	if err := decodeJSON(w, r, waitpoints.MaxDataBytes+4<<10, &req); err != nil {
		return err
	}
	wp, err := ws.Complete(r.Context(), r.PathValue("id"), req.Data)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wp)
}

func (s *Server) cancelToken(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.waits()
	if err != nil {
		return err
	}
	if _, err := s.visibleWaitpoint(r, ws); err != nil {
		return err
	}
	var req CancelRequest
	if err := decodeOptionalJSON(w, r, 64<<10, &req); err != nil {
		return err
	}
	wp, err := ws.Cancel(r.Context(), r.PathValue("id"), req.Reason)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wp)
}

// tokenCallback completes a token with the POSTed body (JSON; empty is
// null). It needs no credentials but the URL's secret; a wrong secret is
// not_found.
func (s *Server) tokenCallback(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.waits()
	if err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, waitpoints.MaxDataBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errdefs.TooLargef("request body too large")
		}
		return errdefs.Invalidf("read the request body: %v", err)
	}
	wp, err := ws.Callback(r.Context(), r.PathValue("id"), r.PathValue("secret"), body)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": wp.ID, "status": wp.Status})
}

func (s *Server) approveRun(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.waits()
	if err != nil {
		return err
	}
	if _, err := s.visibleRun(r); err != nil {
		return err
	}
	var req CompleteRequest
	if err := decodeOptionalJSON(w, r, waitpoints.MaxDataBytes+4<<10, &req); err != nil {
		return err
	}
	wp, err := ws.Approve(r.Context(), r.PathValue("id"), req.Data)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wp)
}

func (s *Server) rejectRun(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.waits()
	if err != nil {
		return err
	}
	if _, err := s.visibleRun(r); err != nil {
		return err
	}
	var req CancelRequest
	if err := decodeOptionalJSON(w, r, 64<<10, &req); err != nil {
		return err
	}
	wp, err := ws.Reject(r.Context(), r.PathValue("id"), req.Reason)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wp)
}

// RunView is a run as GET /v1/runs/{id} shows it: with its metadata
// (ctx.metadata) and the waitpoints a WAITING run waits on.
type RunView struct {
	runs.Run
	Metadata  map[string]json.RawMessage `json:"metadata"`
	WaitingOn []waitpoints.Waitpoint     `json:"waitingOn,omitempty"`
	// Children are the runs it triggered (the latest
	// runs.MaxChildrenShown, oldest first; GET /v1/runs?parent=ID lists
	// all of them).
	Children []runs.ChildSummary `json:"children,omitempty"`
}

func (s *Server) runView(r *http.Request, run runs.Run) (RunView, error) {
	md, err := s.cfg.Runs.Metadata(r.Context(), run.ID)
	if err != nil {
		return RunView{}, err
	}
	v := RunView{Run: run, Metadata: md}
	if v.Children, err = s.cfg.Runs.Children(r.Context(), run.ID); err != nil {
		return RunView{}, err
	}
	if run.Status != runs.StatusWaiting || s.cfg.Waits == nil {
		return v, nil
	}
	page, err := s.cfg.Waits.List(r.Context(), waitpoints.Filter{Project: run.Project, Env: run.Env, RunID: run.ID,
		Status: waitpoints.StatusWaiting, Waited: true, Limit: 100})
	if err != nil {
		return v, err
	}
	v.WaitingOn = page.Waitpoints
	return v, nil
}

// decodeOptionalJSON is decodeJSON for a body that may be empty.
func decodeOptionalJSON(w http.ResponseWriter, r *http.Request, max int64, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	return decodeJSON(w, r, max, v)
}
