package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// Access is what a route requires: AccessOpen, AccessWorker, AccessOwner,
// or the name of an apikeys.Grant.
type Access string

// Access kinds other than grants.
const (
	// AccessOpen: no credential (the health check only).
	AccessOpen Access = "open"
	// AccessWorker: the worker token.
	AccessWorker Access = "worker"
	// AccessOwner: the owner credential; no API key, whatever its grants
	// (keys cannot mint keys).
	AccessOwner Access = "owner"
	// AccessLogin: the browser sign-in, which takes the owner credential
	// or an API key in its body.
	AccessLogin Access = "login"
	// AccessSignedIn: the owner or any API key, whatever its grants; not
	// a worker.
	AccessSignedIn Access = "signed-in"
)

func (a Access) valid() bool {
	switch a {
	case AccessOpen, AccessWorker, AccessOwner, AccessLogin, AccessSignedIn:
		return true
	}
	return apikeys.Grant(a).Valid()
}

// Authenticator turns a bearer credential into the principal it stands
// for; an unknown, expired or revoked one is errdefs.ErrUnauthenticated.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (apikeys.Principal, error)
}

type principalKey struct{}

// sessionKey holds the apikeys.SessionInfo of a request authenticated by
// its session cookie.
type sessionKey struct{}

// guard wraps h with the check its route's access declares. A request
// that passes carries its principal in its context for authorize.
func (s *Server) guard(access Access, h handlerFunc) handlerFunc {
	switch access {
	case AccessOpen, AccessLogin:
		return h
	case AccessWorker:
		return s.worker(h)
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		p, session, err := s.authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="helmr"`)
			return err
		}
		switch {
		case access == AccessSignedIn:
			if p.Worker {
				return errdefs.Forbiddenf("%s is not the owner or an API key", p)
			}
		case access == AccessOwner:
			if !p.Owner {
				return errdefs.Forbiddenf("only the owner credential may do this: an API key cannot create, list or revoke keys, nor read the host's doctor report")
			}
		case !p.Has(apikeys.Grant(access)):
			return errdefs.Forbiddenf("%s lacks the %s grant this request needs", p, access)
		}
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		if session != nil {
			ctx = context.WithValue(ctx, sessionKey{}, *session)
		}
		return h(w, r.WithContext(ctx))
	}
}

// authenticate reads the request's bearer credential or, without one,
// its session cookie (then also returning the session).
func (s *Server) authenticate(r *http.Request) (apikeys.Principal, *apikeys.SessionInfo, error) {
	h := r.Header.Get("Authorization")
	if k := r.Header.Get("X-API-Key"); h == "" && k != "" {
		h = "Bearer " + k // the header SWE-ReX's client (and many others) send
	}
	if h == "" && s.cfg.Sessions != nil {
		if c, err := r.Cookie(SessionCookie); err == nil {
			info, err := s.sessionPrincipal(r, c)
			if err != nil {
				return apikeys.Principal{}, nil, err
			}
			return info.Principal, &info, nil
		}
	}
	if h == "" {
		return apikeys.Principal{}, nil, errdefs.Unauthenticatedf("this request needs a credential: Authorization: Bearer <API key or owner credential>, or a session cookie (sign in at /login)")
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return apikeys.Principal{}, nil, errdefs.Unauthenticatedf(`the Authorization header must read "Bearer <API key or owner credential>"`)
	}
	if s.auth == nil {
		return apikeys.Principal{}, nil, errdefs.Unauthenticatedf("this control plane has no credentials configured")
	}
	p, err := s.auth.Authenticate(r.Context(), tok)
	return p, nil, err
}

// authorize checks that the request's principal may act on the project
// environment the request names: 403 if not.
func authorize(ctx context.Context, project, env string) error {
	p, ok := ctx.Value(principalKey{}).(apikeys.Principal)
	if !ok {
		return errdefs.Unauthenticatedf("this request needs a credential")
	}
	if !p.InScope(project, env) {
		return errdefs.Forbiddenf("%s is scoped to %s/%s, not %s/%s", p, p.Project, p.Env, project, env)
	}
	return nil
}

// authorizeRun lets the request see a run it addressed by id only if the
// run is in its principal's scope. A run of another project environment
// is not found, exactly as a missing one, so that ids do not reveal what
// exists elsewhere.
func authorizeRun(ctx context.Context, r runs.Run) error {
	return authorizeObject(ctx, r.Project, r.Env, fmt.Errorf("get run %s: %w", r.ID, errdefs.ErrNotFound))
}

// authorizeDeployment is authorizeRun for deployments.
func authorizeDeployment(ctx context.Context, d deployments.Deployment) error {
	return authorizeObject(ctx, d.Project, d.Env, fmt.Errorf("get deployment %s: %w", d.ID, errdefs.ErrNotFound))
}

// authorizeObject lets a request see an object of project/env it addressed
// by id only in its principal's scope; otherwise the answer is notFound,
// as for a missing object.
func authorizeObject(ctx context.Context, project, env string, notFound error) error {
	if err := authorize(ctx, project, env); err != nil {
		return hidden(err, notFound)
	}
	return nil
}

// hidden replaces a scope refusal with notFound; other errors stay.
func hidden(err, notFound error) error {
	if errors.Is(err, errdefs.ErrForbidden) {
		return notFound
	}
	return err
}

// worker guards the worker endpoints: a worker credential (hw_...), or
// the shared worker token. Neither the owner nor an API key is a worker.
func (s *Server) worker(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var p apikeys.Principal
		switch {
		case !ok || tok == "":
		case s.cfg.WorkerToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.WorkerToken)) == 1:
			p = apikeys.Principal{Worker: true}
		case s.auth != nil:
			if _, isWorker := apikeys.WorkerCredentialID(tok); isWorker {
				var err error
				if p, err = s.auth.Authenticate(r.Context(), tok); err != nil && !errors.Is(err, errdefs.ErrUnauthenticated) {
					return err
				}
			}
		}
		if !p.Worker {
			w.Header().Set("WWW-Authenticate", `Bearer realm="helmr-worker"`)
			return errdefs.Unauthenticatedf("a valid worker token or worker credential is required")
		}
		return h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

// actAs checks that a worker request may act as workerID: a worker
// credential's workers use IDs that start with its prefix.
func actAs(ctx context.Context, workerID string) error {
	p, _ := ctx.Value(principalKey{}).(apikeys.Principal)
	if pre := p.WorkerPrefix(); pre != "" && !strings.HasPrefix(workerID, pre) {
		return errdefs.Forbiddenf("%s acts only as worker IDs starting %q, not %q", p, pre, workerID)
	}
	return nil
}

// heldRun is the run a worker request addresses, if its worker holds it:
// a worker credential sees only runs leased to its workers (others are not
// found). The shared worker token sees every run.
func (s *Server) heldRun(r *http.Request) (runs.Run, error) {
	run, err := s.cfg.Runs.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return runs.Run{}, err
	}
	p, _ := r.Context().Value(principalKey{}).(apikeys.Principal)
	if pre := p.WorkerPrefix(); pre != "" && !strings.HasPrefix(run.WorkerID, pre) {
		return runs.Run{}, fmt.Errorf("get run %s: %w", run.ID, errdefs.ErrNotFound)
	}
	return run, nil
}
