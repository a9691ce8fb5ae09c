// Package httpapi serves Helmr's control-plane HTTP API under /v1: JSON
// resources, server-sent event streams, and the worker endpoints.
package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/vault"
	"github.com/helmr/helmr/internal/waitpoints"
	"github.com/helmr/helmr/internal/workspaces"
)

// Error is what a client sees: an HTTP status, a stable code and a message.
// Err, if set, is logged and never shown.
type Error struct {
	Status  int
	Code    string
	Message string
	Details any
	Err     error
}

func (e *Error) Error() string { return e.Message }

func badRequest(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: msg}
}

// toHTTP maps domain errors to transport errors, in one place.
func toHTTP(err error) *Error {
	var he *Error
	if errors.As(err, &he) {
		return he
	}
	var ve *deployments.ValidationError
	switch {
	case errors.As(err, &ve):
		return &Error{Status: http.StatusUnprocessableEntity, Code: "deployment_build", Message: err.Error(), Details: ve.Problems}
	case errors.Is(err, runs.ErrNotFound), errors.Is(err, deployments.ErrNotFound), errors.Is(err, vault.ErrNotFound),
		errors.Is(err, waitpoints.ErrNotFound), errors.Is(err, workspaces.ErrNotFound), errors.Is(err, apikeys.ErrNotFound),
		errors.Is(err, checkpoints.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Code: "not_found", Message: err.Error()}
	case errors.Is(err, runs.ErrConflict), errors.Is(err, waitpoints.ErrConflict), errors.Is(err, workspaces.ErrConflict):
		return &Error{Status: http.StatusConflict, Code: "conflict", Message: err.Error()}
	case errors.Is(err, runs.ErrInvalid), errors.Is(err, deployments.ErrInvalid), errors.Is(err, vault.ErrInvalid),
		errors.Is(err, waitpoints.ErrInvalid), errors.Is(err, workspaces.ErrInvalid), errors.Is(err, apikeys.ErrInvalid):
		return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: err.Error()}
	}
	return &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error", Err: err}
}

type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// adapt turns a handler that returns errors into an http.Handler that
// writes them as {"error": {"code", "message"}}.
func (s *Server) adapt(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		he := toHTTP(err)
		if he.Status >= 500 {
			s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		body := map[string]any{"code": he.Code, "message": he.Message}
		if he.Details != nil {
			body["details"] = he.Details
		}
		writeJSON(w, he.Status, map[string]any{"error": body})
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}

// decodeJSON reads a JSON body of at most max bytes into v, rejecting
// unknown fields.
func decodeJSON(w http.ResponseWriter, r *http.Request, max int64, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, max)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &Error{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Message: "request body too large"}
		}
		return badRequest("request body is not valid JSON: " + err.Error())
	}
	if dec.More() {
		return badRequest("request body has trailing data after the JSON value")
	}
	return nil
}
