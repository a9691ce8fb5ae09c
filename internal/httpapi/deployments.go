package httpapi

import (
	"net/http"
	"strconv"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/schedules"
	"github.com/helmr/helmr/internal/store"
)

// MaxDeploymentBytes bounds a deployment upload (bundles and copied files,
// base64-encoded).
const MaxDeploymentBytes = 96 << 20

// CreateDeploymentRequest is the body of POST /v1/deployments.
type CreateDeploymentRequest struct {
	Env      string               `json:"env,omitempty"`
	Manifest deployments.Manifest `json:"manifest"`
	Files    map[string][]byte    `json:"files"`
	// Build builds the tasks' images ahead of time on a worker, in a build
	// run: the deployment is BUILDING until it completes and only then
	// provides the current tasks. NoCache runs every run step again.
	Build   bool `json:"build,omitempty"`
	NoCache bool `json:"noCache,omitempty"`
}

func (s *Server) createDeployment(w http.ResponseWriter, r *http.Request) error {
	var req CreateDeploymentRequest
	if err := decodeJSON(w, r, MaxDeploymentBytes, &req); err != nil {
		return err
	}
	if req.Env == "" {
		req.Env = "dev"
	}
	if !deployments.ValidName(req.Env) {
		return errdefs.Invalidf("env %q is not a valid name (1-128 letters, digits, '.', '_' or '-')", req.Env)
	}
	if err := authorize(r.Context(), req.Manifest.Project, req.Env); err != nil {
		return err
	}
	if err := req.Manifest.Validate(req.Files); err != nil {
		return err
	}
	if err := schedules.ValidateManifest(req.Manifest); err != nil {
		return err
	}
	if req.NoCache && !req.Build {
		return errdefs.Invalidf("noCache applies to a deployment built ahead of time: set build too")
	}
	in := deployments.Deployment{Project: req.Manifest.Project, Env: req.Env, Manifest: req.Manifest, Files: req.Files}
	if req.Build {
		in.BuildRunID = store.NewID(store.RunPrefix)
	}
	d, err := s.cfg.Deployments.CreateDeployment(r.Context(), in)
	if err != nil {
		return err
	}
	if err := s.cfg.Runs.DeclareQueues(r.Context(), d.Project, d.Env, d.Manifest.Tasks); err != nil {
		return err
	}
	if req.Build {
		// The deployment names its build run, so a run that cannot be
		// queued leaves it FAILED ("build run missing"), never READY.
		if _, err := s.cfg.Runs.QueueBuild(r.Context(), d.BuildRunID, d, runs.BuildPayload{NoCache: req.NoCache}); err != nil {
			return err
		}
	}
	s.syncSchedules(r.Context(), d)
	s.log.Info("deployment created", "deployment_id", d.ID, "project", d.Project, "env", d.Env, "version", d.Version, "build_run_id", d.BuildRunID)
	return writeJSON(w, http.StatusCreated, d)
}

func (s *Server) listDeployments(w http.ResponseWriter, r *http.Request) error {
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	limit, err := intParam(r, "limit", 50)
	if err != nil {
		return err
	}
	ds, err := s.cfg.Deployments.ListDeployments(r.Context(), project, env, limit)
	if err != nil {
		return err
	}
	if ds == nil {
		ds = []deployments.Deployment{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"deployments": ds})
}

// listProjects answers the project environments the principal can see:
// every deployed one for the owner, its own for a scoped key (deployed
// or not).
func (s *Server) listProjects(w http.ResponseWriter, r *http.Request) error {
	p, ok := r.Context().Value(principalKey{}).(apikeys.Principal)
	if !ok {
		return errdefs.Unauthenticatedf("this request needs a credential")
	}
	out := []deployments.Environment{}
	if !p.Owner {
		out = append(out, deployments.Environment{Project: p.Project, Env: p.Env})
		return writeJSON(w, http.StatusOK, map[string]any{"environments": out})
	}
	envs, err := s.cfg.Deployments.ListEnvironments(r.Context())
	if err != nil {
		return err
	}
	out = append(out, envs...)
	return writeJSON(w, http.StatusOK, map[string]any{"environments": out})
}

func (s *Server) getDeployment(w http.ResponseWriter, r *http.Request) error {
	d, err := s.cfg.Deployments.GetDeployment(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := authorizeDeployment(r.Context(), d); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, d)
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) error {
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	ts, err := s.cfg.Deployments.CurrentTasks(r.Context(), project, env)
	if err != nil {
		return err
	}
	if ts == nil {
		ts = []deployments.Task{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"tasks": ts})
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request) error {
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	t, err := s.cfg.Deployments.GetTask(r.Context(), project, env, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, t)
}

// intParam reads an optional integer query parameter in 0..maxListLimit.
func intParam(r *http.Request, name string, def int) (int, error) {
	q := r.URL.Query()
	if !q.Has(name) {
		return def, nil
	}
	n, err := strconv.Atoi(q.Get(name))
	if err != nil || n < 0 || n > maxListLimit {
		return 0, errdefs.Invalidf("%s must be an integer from 0 to %d", name, maxListLimit)
	}
	return n, nil
}

// maxListLimit caps every page size.
const maxListLimit = 1000
