// Package httpapi serves Helmr's control-plane HTTP API under /v1: JSON
// resources, server-sent event streams, and the worker endpoints.
package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/errdefs/errhttp"
)

// Error is what the client sees of an error: its status, code and
// message (a handler may also return one, for a status of the transport's
// own, outside the domain's kinds). Err, if set, is logged and never
// shown.
type Error struct {
	Status  int
	Code    string
	Message string
	Details any
	Err     error
}

func (e *Error) Error() string { return e.Message }

// toHTTP maps an error to what the client sees, in one place: the status
// and code of its errdefs kind (errhttp), its message; an error of no kind
// is a 500 whose message is never shown.
func toHTTP(err error) *Error {
	var he *Error
	if errors.As(err, &he) {
		return he
	}
	var ve *deployments.ValidationError
	if errors.As(err, &ve) {
		return &Error{Status: http.StatusUnprocessableEntity, Code: "deployment_build", Message: err.Error(), Details: ve.Problems}
	}
	status, code := errhttp.Status(err)
	if status == http.StatusInternalServerError {
		return &Error{Status: status, Code: code, Message: "internal error", Err: err}
	}
	return &Error{Status: status, Code: code, Message: err.Error()}
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
		out := map[string]any{"error": body}
		if strings.HasPrefix(r.URL.Path, "/v1/swerex/") {
			// SWE-ReX's client prints FastAPI's "detail" of an error.
			out["detail"] = he.Message
		}
		writeJSON(w, he.Status, out)
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
			return errdefs.TooLargef("request body too large")
		}
		return errdefs.Invalidf("request body is not valid JSON: %v", err)
	}
	if dec.More() {
		return errdefs.Invalidf("request body has trailing data after the JSON value")
	}
	return nil
}
