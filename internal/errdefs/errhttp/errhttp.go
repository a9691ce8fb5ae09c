// Package errhttp translates the error kinds of errdefs to HTTP and back:
// one table that the API server (httpapi) writes answers with and the Go
// client (client) reads them with.
package errhttp

import (
	"net/http"

	"github.com/helmr/helmr/internal/errdefs"
)

// kind is one row of the table: an errdefs kind, its HTTP status and the
// stable code the API's error bodies carry.
type kind struct {
	err    error
	status int
	code   string
}

var table = []kind{
	{errdefs.ErrNotFound, http.StatusNotFound, "not_found"},
	{errdefs.ErrConflict, http.StatusConflict, "conflict"},
	{errdefs.ErrInvalid, http.StatusBadRequest, "invalid_request"},
	{errdefs.ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
	{errdefs.ErrUnauthenticated, http.StatusUnauthorized, "unauthorized"},
	{errdefs.ErrForbidden, http.StatusForbidden, "forbidden"},
	{errdefs.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
	{errdefs.ErrUpstream, http.StatusBadGateway, "worker_error"},
	{errdefs.ErrTimeout, http.StatusGatewayTimeout, "no_worker"},
}

// Status returns the HTTP status and code of err's kind; an error of no
// kind is a 500 "internal".
func Status(err error) (status int, code string) {
	k := errdefs.Kind(err)
	for _, row := range table {
		if row.err == k {
			return row.status, row.code
		}
	}
	return http.StatusInternalServerError, "internal"
}

// Kind returns the errdefs kind an HTTP status stands for, or nil for a
// status no kind maps to (a 500, say).
func Kind(status int) error {
	for _, row := range table {
		if row.status == status {
			return row.err
		}
	}
	return nil
}
