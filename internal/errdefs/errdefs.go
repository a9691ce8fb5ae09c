// Package errdefs is the domain's one vocabulary of error kinds. Domain
// code returns a kind wrapped with context
// (fmt.Errorf("get run %s: %w", id, errdefs.ErrNotFound)), or an error of a
// kind with a message of its own (errdefs.Invalidf("...")); callers branch
// with errors.Is on the kinds, never on messages. Transports translate the
// kinds to their codes once, at the edge (httpapi's toHTTP, the client's
// APIError.Is the other way).
//
// An error that carries no kind is an internal failure (a 500): a failed
// lookup is a "not found" only when the store said so.
package errdefs

import (
	"errors"
	"fmt"
)

// The kinds, in the order Kind tries them.
var (
	// ErrNotFound: no such object, or one outside the caller's scope.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the object's state forbids the change (a run that
	// ended, an idempotency key reused with other data, a newer snapshot).
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the request is malformed or breaks a rule.
	ErrInvalid = errors.New("invalid")
	// ErrTooLarge: the request (or what it asks for) is over a size limit.
	ErrTooLarge = errors.New("too large")
	// ErrUnauthenticated: the credential is missing, malformed, unknown,
	// expired or revoked.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: the credential lacks the grant or the scope.
	ErrForbidden = errors.New("forbidden")
	// ErrUnavailable: this deployment of Helmr does not offer the service
	// (no vault, no blob store), or it is down for now.
	ErrUnavailable = errors.New("unavailable")
	// ErrUpstream: a worker or a sandbox failed to carry the request out.
	ErrUpstream = errors.New("upstream failed")
	// ErrTimeout: nothing carried the request out in time (no worker took
	// an operation).
	ErrTimeout = errors.New("timed out")
)

// Kinds lists every kind, in the order Kind tries them.
var Kinds = []error{ErrNotFound, ErrConflict, ErrInvalid, ErrTooLarge, ErrUnauthenticated, ErrForbidden,
	ErrUnavailable, ErrUpstream, ErrTimeout}

// Kind returns the first kind err wraps, or nil for an error of no kind
// (an internal failure).
func Kind(err error) error {
	if err == nil {
		return nil
	}
	for _, k := range Kinds {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

// kinded is an error of a kind whose message is its own: the kind's word
// is not added to it.
type kinded struct {
	kind error
	err  error
}

func (e *kinded) Error() string   { return e.err.Error() }
func (e *kinded) Unwrap() []error { return []error{e.kind, e.err} }

// Newf returns an error of kind with the message fmt.Sprintf(format,
// args...); a %w in format wraps as fmt.Errorf does.
func Newf(kind error, format string, args ...any) error {
	return &kinded{kind: kind, err: fmt.Errorf(format, args...)}
}

// NotFoundf is Newf(ErrNotFound, ...).
func NotFoundf(format string, args ...any) error { return Newf(ErrNotFound, format, args...) }

// Conflictf is Newf(ErrConflict, ...).
func Conflictf(format string, args ...any) error { return Newf(ErrConflict, format, args...) }

// Invalidf is Newf(ErrInvalid, ...).
func Invalidf(format string, args ...any) error { return Newf(ErrInvalid, format, args...) }

// TooLargef is Newf(ErrTooLarge, ...).
func TooLargef(format string, args ...any) error { return Newf(ErrTooLarge, format, args...) }

// Unavailablef is Newf(ErrUnavailable, ...).
func Unavailablef(format string, args ...any) error { return Newf(ErrUnavailable, format, args...) }

// Upstreamf is Newf(ErrUpstream, ...).
func Upstreamf(format string, args ...any) error { return Newf(ErrUpstream, format, args...) }

// Unauthenticatedf is Newf(ErrUnauthenticated, ...).
func Unauthenticatedf(format string, args ...any) error {
	return Newf(ErrUnauthenticated, format, args...)
}

// Forbiddenf is Newf(ErrForbidden, ...).
func Forbiddenf(format string, args ...any) error { return Newf(ErrForbidden, format, args...) }
