package httpapi

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/vault"
	"github.com/helmr/helmr/internal/waitpoints"
	"github.com/helmr/helmr/internal/worker"
	"github.com/helmr/helmr/internal/workspaces"
)

// Config wires a Server.
type Config struct {
	Runs        *runs.Service
	Deployments deployments.Store
	// WorkerToken authenticates remote workers (Authorization: Bearer).
	// Empty disables the worker endpoints.
	WorkerToken string
	Logger      *slog.Logger
	// LeaseWait bounds how long a worker's lease request waits for work.
	LeaseWait time.Duration
	// Vault holds the secrets; nil: the secrets endpoints answer 503.
	Vault *vault.Vault
	// Workspaces holds the workspaces; nil: the workspace endpoints
	// answer 503.
	Workspaces workspaces.Store
	// Waits serves tokens, human waits and timers; nil: the tokens
	// endpoints answer 503.
	Waits *waitpoints.Service
}

// Server is the control plane's HTTP API.
type Server struct {
	cfg     Config
	control *worker.Local
	log     *slog.Logger
	mux     *http.ServeMux
}

// Route is one API route: its ServeMux pattern. The OpenAPI test checks the
// document in proto/ against this list.
type Route struct{ Method, Path string }

// New builds the API handler.
func New(cfg Config) *Server {
	if cfg.LeaseWait == 0 {
		cfg.LeaseWait = 20 * time.Second
	}
	s := &Server{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(),
		control: &worker.Local{Runs: cfg.Runs, Deployments: cfg.Deployments, Workspaces: cfg.Workspaces, Waits: cfg.Waits, Wait: cfg.LeaseWait}}
	for _, r := range s.routes() {
		s.mux.Handle(r.pattern, s.adapt(r.h))
	}
	return s
}

type route struct {
	pattern string
	h       handlerFunc
}

func (s *Server) routes() []route {
	w := s.worker
	return []route{
		{"GET /v1/health", s.health},
		{"POST /v1/deployments", s.createDeployment},
		{"GET /v1/deployments", s.listDeployments},
		{"GET /v1/deployments/{id}", s.getDeployment},
		{"GET /v1/tasks", s.listTasks},
		{"GET /v1/tasks/{id}", s.getTask},
		{"POST /v1/tasks/{id}/runs", s.triggerRun},
		{"GET /v1/runs", s.listRuns},
		{"GET /v1/runs/{id}", s.getRun},
		{"POST /v1/runs/{id}/cancel", s.cancelRun},
		{"POST /v1/runs/{id}/approve", s.approveRun},
		{"POST /v1/runs/{id}/reject", s.rejectRun},
		{"GET /v1/runs/{id}/events", s.listEvents},
		{"GET /v1/runs/{id}/events/stream", s.streamEvents},
		{"GET /v1/secrets", s.listSecrets},
		{"PUT /v1/secrets/{name}", s.setSecret},
		{"DELETE /v1/secrets/{name}", s.deleteSecret},
		{"GET /v1/workspaces", s.listWorkspaces},
		{"GET /v1/workspaces/{id}", s.getWorkspace},
		{"DELETE /v1/workspaces/{id}", s.deleteWorkspace},
		{"POST /v1/tokens", s.createToken},
		{"GET /v1/tokens", s.listTokens},
		{"GET /v1/tokens/{id}", s.getToken},
		{"POST /v1/tokens/{id}/complete", s.completeToken},
		{"POST /v1/tokens/{id}/cancel", s.cancelToken},
		{"POST /v1/tokens/{id}/callback/{secret}", s.tokenCallback},
		{"POST /v1/worker/lease", w(s.workerLease)},
		{"POST /v1/worker/heartbeat", w(s.workerHeartbeat)},
		{"GET /v1/worker/deployments/{id}/files", w(s.workerFiles)},
		{"POST /v1/worker/runs/{id}/started", w(s.workerStarted)},
		{"POST /v1/worker/runs/{id}/logs", w(s.workerLogs)},
		{"POST /v1/worker/runs/{id}/finish", w(s.workerFinish)},
		{"GET /v1/worker/runs/{id}/status", w(s.workerStatus)},
		{"GET /v1/worker/runs/{id}/secrets", w(s.workerSecrets)},
		{"GET /v1/worker/runs/{id}/build-secrets/{name}", w(s.workerBuildSecret)},
		{"POST /v1/worker/workspaces/deleted", w(s.workerDeletedWorkspaces)},
		{"POST /v1/worker/runs/{id}/waitpoints", w(s.workerCreateWaitpoint)},
		{"POST /v1/worker/runs/{id}/waits/{wp}", w(s.workerBeginWait)},
		{"GET /v1/worker/runs/{id}/waits/{wp}", w(s.workerAwaitWaitpoint)},
		{"POST /v1/worker/runs/{id}/waits/{wp}/end", w(s.workerEndWait)},
	}
}

// Routes lists the API's routes.
func (s *Server) Routes() []Route {
	var out []Route
	for _, r := range s.routes() {
		m, p, _ := strings.Cut(r.pattern, " ")
		out = append(out, Route{Method: m, Path: p})
	}
	return out
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	s.mux.ServeHTTP(w, r)
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// worker guards the worker endpoints with the worker token.
func (s *Server) worker(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if s.cfg.WorkerToken == "" || !ok ||
			subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.WorkerToken)) != 1 {
			return &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "a valid worker token is required"}
		}
		return h(w, r)
	}
}

// scope reads the project environment a request addresses: project is
// required, env defaults to "dev".
func scope(r *http.Request) (project, env string, err error) {
	q := r.URL.Query()
	project, env = q.Get("project"), q.Get("env")
	if !q.Has("env") {
		env = "dev"
	}
	if project == "" {
		return "", "", badRequest("the project query parameter is required")
	}
	if !deployments.ValidName(project) {
		return "", "", badRequest(fmt.Sprintf("project %q is not a valid name (1-128 letters, digits, '.', '_' or '-')", project))
	}
	if !deployments.ValidName(env) {
		return "", "", badRequest(fmt.Sprintf("env %q is not a valid name (1-128 letters, digits, '.', '_' or '-')", env))
	}
	return project, env, nil
}
