package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/console"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/schedules"
	"github.com/helmr/helmr/internal/swerex"
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
	// Workspaces serves the workspaces and their direct operations (the
	// workspace, SWE-ReX and worker operation endpoints); nil: they
	// answer 503.
	Workspaces *workspaces.Service
	// Waits serves tokens, human waits and timers; nil: the tokens
	// endpoints answer 503.
	Waits *waitpoints.Service
	// APIKeys creates, lists and revokes API keys, and authenticates
	// requests unless Authenticator is set. With neither, every route but
	// the health check answers 401.
	APIKeys       *apikeys.Service
	Authenticator Authenticator
	// Sessions enables browser sessions (/login with the owner credential
	// or an API key); nil: /login answers 404 and session cookies are
	// ignored.
	Sessions *apikeys.Sessions
	// Checkpoints and Blobs keep parked runs' checkpoints (records and
	// sealed bytes) and workspace snapshots; nil: the checkpoint and
	// snapshot routes answer 503.
	Checkpoints checkpoints.Store
	Blobs       checkpoints.Blobs
	// Schedules serves the schedules API and syncs declarative
	// schedules at deploy; nil: the schedules endpoints answer 503.
	Schedules *schedules.Service
	// Doctor reports on the control plane's host for GET /v1/doctor;
	// nil: that route answers 503.
	Doctor DoctorFunc
	// E2B serves E2B's API (package e2b) under /e2b: E2B's SDKs use
	// E2B_API_URL=http://HOST/e2b. Nil: /e2b is not served.
	E2B http.Handler
}

// Server is the control plane's HTTP API.
type Server struct {
	cfg     Config
	auth    Authenticator
	control *worker.Local
	log     *slog.Logger
	mux     *http.ServeMux
	swx     *swerex.API // the SWE-ReX endpoints (nil without workspaces)
	logins  *loginLimiter
}

// Route is one API route: its ServeMux pattern and the access it
// requires. The OpenAPI test checks the document in proto/ against this
// list, and the auth test walks it.
type Route struct {
	Method, Path string
	Access       Access
}

// New builds the API handler.
func New(cfg Config) *Server {
	if cfg.LeaseWait == 0 {
		cfg.LeaseWait = 20 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	control := &worker.Local{Runs: cfg.Runs, Deployments: cfg.Deployments, Waits: cfg.Waits, Ops: workspaces.NewOps(), Wait: cfg.LeaseWait,
		Checkpoints: cfg.Checkpoints, Blobs: cfg.Blobs, Logger: cfg.Logger}
	s := &Server{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), auth: cfg.Authenticator, control: control,
		logins: newLoginLimiter()}
	if cfg.Workspaces != nil {
		control.Workspaces, control.Ops = cfg.Workspaces.Store(), cfg.Workspaces.Ops()
		s.swx = swerex.New(cfg.Workspaces)
	}
	if s.auth == nil && cfg.APIKeys != nil {
		s.auth = cfg.APIKeys
	}
	for _, r := range s.routes() {
		if !r.access.valid() {
			panic(fmt.Sprintf("route %s: unknown access %q", r.pattern, r.access))
		}
		s.mux.Handle(r.pattern, s.adapt(s.guard(r.access, r.h)))
	}
	// The console at / reads the API in-process; a path under /v1 that
	// no route serves stays an API error.
	ui := console.New(s, cfg.Logger)
	s.mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allow := s.allowed(r); len(allow) > 0 { // an API route (/login) asked with another method
			s.adapt(s.noRoute).ServeHTTP(w, r)
			return
		}
		ui.ServeHTTP(w, r)
	}))
	s.mux.Handle("/v1/", s.adapt(s.noRoute))
	if cfg.E2B != nil {
		s.mux.Handle("/e2b/", http.StripPrefix("/e2b", cfg.E2B))
	}
	return s
}

// noRoute answers a request under /v1 that no route serves: 405 with the
// methods the path has, or 404. (The console's "/" would otherwise take
// every method a route does not name.)
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) error {
	if allow := s.allowed(r); len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		return &Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Message: fmt.Sprintf("%s %s: this path takes %s", r.Method, r.URL.Path, strings.Join(allow, ", "))}
	}
	return errdefs.NotFoundf("no API route %s %s", r.Method, r.URL.Path)
}

// allowed lists the methods the API's routes take at r's path.
func (s *Server) allowed(r *http.Request) []string {
	var allow []string
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "/v1/" && pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	return allow
}

type route struct {
	pattern string
	access  Access
	h       handlerFunc
}

// Grants as route access.
const (
	runsCreate   = Access(apikeys.RunsCreate)
	runsRead     = Access(apikeys.RunsRead)
	runsManage   = Access(apikeys.RunsManage)
	secretsWrite = Access(apikeys.SecretsWrite)
	tasksDeploy  = Access(apikeys.TasksDeploy)
	tasksRead    = Access(apikeys.TasksRead)

	schedulesRead   = Access(apikeys.SchedulesRead)
	schedulesManage = Access(apikeys.SchedulesManage)

	tokensCreate     = Access(apikeys.TokensCreate)
	tokensRead       = Access(apikeys.TokensRead)
	tokensComplete   = Access(apikeys.TokensComplete)
	tokensCancel     = Access(apikeys.TokensCancel)
	workspacesRead   = Access(apikeys.WorkspacesRead)
	workspacesManage = Access(apikeys.WorkspacesManage)
	workspacesExec   = Access(apikeys.WorkspacesExec)

	sessionStreamsRead  = Access(apikeys.SessionStreamsRead)
	sessionInputSend    = Access(apikeys.SessionInputSend)
	sessionOutputAppend = Access(apikeys.SessionOutputAppend)
)

// routes is the API: every route with the access it requires, in one
// table. Handlers of routes that name a project environment (query or
// body) check it with scope or authorize (403 outside the principal's
// scope); those that address an object by id check its scope with
// authorizeRun or authorizeDeployment (404 outside it).
func (s *Server) routes() []route {
	return []route{
		{"GET /v1/health", AccessOpen, s.health},
		{"POST /v1/deployments", tasksDeploy, s.createDeployment},
		{"GET /v1/deployments", tasksRead, s.listDeployments},
		{"GET /v1/deployments/{id}", tasksRead, s.getDeployment},
		{"GET /v1/projects", tasksRead, s.listProjects},
		{"GET /v1/tasks", tasksRead, s.listTasks},
		{"GET /v1/tasks/{id}", tasksRead, s.getTask},
		{"POST /v1/tasks/{id}/runs", runsCreate, s.triggerRun},
		{"GET /v1/runs", runsRead, s.listRuns},
		{"GET /v1/runs/{id}", runsRead, s.getRun},
		{"POST /v1/runs/{id}/cancel", runsManage, s.cancelRun},
		{"POST /v1/runs/{id}/replay", runsCreate, s.replayRun},
		{"POST /v1/runs/bulk/cancel", runsManage, s.bulkCancel},
		{"POST /v1/runs/bulk/replay", runsCreate, s.bulkReplay},
		{"POST /v1/runs/{id}/approve", runsManage, s.approveRun},
		{"POST /v1/runs/{id}/reject", runsManage, s.rejectRun},
		{"GET /v1/runs/{id}/events", runsRead, s.listEvents},
		{"GET /v1/runs/{id}/events/stream", runsRead, s.streamEvents},
		{"POST /v1/runs/{id}/session/input", sessionInputSend, s.appendRecord(runs.StreamInput)},
		{"POST /v1/runs/{id}/session/output", sessionOutputAppend, s.appendRecord(runs.StreamOutput)},
		{"GET /v1/runs/{id}/session/input/stream", sessionStreamsRead, s.streamRecords(runs.StreamInput)},
		{"GET /v1/runs/{id}/session/output/stream", sessionStreamsRead, s.streamRecords(runs.StreamOutput)},
		{"GET /v1/workers", runsRead, s.listWorkers},
		{"GET /v1/queues", runsRead, s.listQueues},
		{"GET /v1/queues/{name}", runsRead, s.getQueue},
		{"POST /v1/queues/{name}/pause", runsManage, s.pauseQueue(true)},
		{"POST /v1/queues/{name}/resume", runsManage, s.pauseQueue(false)},
		{"GET /v1/doctor", AccessOwner, s.doctor},
		{"GET /v1/secrets", secretsWrite, s.listSecrets},
		{"PUT /v1/secrets/{name}", secretsWrite, s.setSecret},
		{"DELETE /v1/secrets/{name}", secretsWrite, s.deleteSecret},
		{"GET /v1/workspaces", workspacesRead, s.listWorkspaces},
		{"POST /v1/workspaces", workspacesManage, s.createWorkspace},
		{"GET /v1/workspaces/{id}", workspacesRead, s.getWorkspace},
		{"DELETE /v1/workspaces/{id}", workspacesManage, s.deleteWorkspace},
		{"POST /v1/workspaces/{id}/exec", workspacesExec, s.execWorkspace},
		{"POST /v1/workspaces/{id}/exec/stream", workspacesExec, s.execWorkspaceStream},
		{"GET /v1/workspaces/{id}/files", workspacesExec, s.readWorkspaceFile},
		{"PUT /v1/workspaces/{id}/files", workspacesExec, s.writeWorkspaceFile},
		{"GET /v1/workspaces/{id}/dir", workspacesExec, s.listWorkspaceDir},
		{"GET /v1/workspaces/{id}/tar", workspacesExec, s.downloadWorkspaceTar},
		{"PUT /v1/workspaces/{id}/tar", workspacesExec, s.uploadWorkspaceTar},
		{"GET /v1/workspaces/{id}/trajectory", workspacesRead, s.trajectory},
		{"POST /v1/workspaces/{id}/terminals", workspacesExec, s.openTerminal},
		{"GET /v1/workspaces/{id}/terminals/{tid}", workspacesExec, s.getTerminal},
		{"DELETE /v1/workspaces/{id}/terminals/{tid}", workspacesExec, s.closeTerminal},
		{"GET /v1/workspaces/{id}/terminals/{tid}/output", workspacesExec, s.terminalOutput},
		{"POST /v1/workspaces/{id}/terminals/{tid}/input", workspacesExec, s.terminalInput},
		{"POST /v1/workspaces/{id}/terminals/{tid}/resize", workspacesExec, s.resizeTerminal},
		{"GET /v1/swerex/{id}/is_alive", workspacesExec, s.swerex(s.swx.IsAlive)},
		{"POST /v1/swerex/{id}/create_session", workspacesExec, s.swerex(s.swx.CreateSession)},
		{"POST /v1/swerex/{id}/run_in_session", workspacesExec, s.swerex(s.swx.RunInSession)},
		{"POST /v1/swerex/{id}/close_session", workspacesExec, s.swerex(s.swx.CloseSession)},
		{"POST /v1/swerex/{id}/execute", workspacesExec, s.swerex(s.swx.Execute)},
		{"POST /v1/swerex/{id}/read_file", workspacesExec, s.swerex(s.swx.ReadFile)},
		{"POST /v1/swerex/{id}/write_file", workspacesExec, s.swerex(s.swx.WriteFile)},
		{"POST /v1/swerex/{id}/upload", workspacesExec, s.swerex(s.swx.Upload)},
		{"POST /v1/swerex/{id}/close", workspacesExec, s.swerex(s.swx.Close)},
		{"POST /v1/tokens", tokensCreate, s.createToken},
		{"GET /v1/tokens", tokensRead, s.listTokens},
		{"GET /v1/tokens/{id}", tokensRead, s.getToken},
		{"POST /v1/tokens/{id}/complete", tokensComplete, s.completeToken},
		{"POST /v1/tokens/{id}/cancel", tokensCancel, s.cancelToken},
		{"POST /v1/tokens/{id}/callback/{secret}", AccessOpen, s.tokenCallback},
		{"POST /v1/schedules", schedulesManage, s.createSchedule},
		{"GET /v1/schedules", schedulesRead, s.listSchedules},
		{"GET /v1/schedules/{id}", schedulesRead, s.getSchedule},
		{"PATCH /v1/schedules/{id}", schedulesManage, s.updateSchedule},
		{"DELETE /v1/schedules/{id}", schedulesManage, s.deleteSchedule},
		{"POST /v1/schedules/{id}/activate", schedulesManage, s.setScheduleActive(true)},
		{"POST /v1/schedules/{id}/deactivate", schedulesManage, s.setScheduleActive(false)},
		{"POST /v1/apikeys", AccessOwner, s.createAPIKey},
		{"GET /v1/apikeys", AccessOwner, s.listAPIKeys},
		{"POST /v1/apikeys/{id}/revoke", AccessOwner, s.revokeAPIKey},
		{"POST /v1/apikeys/worker", AccessOwner, s.createWorkerCredential},
		{"GET /v1/auth/me", AccessSignedIn, s.me},
		{"GET /login", AccessLogin, s.loginForm},
		{"POST /login", AccessLogin, s.login},
		{"POST /logout", AccessLogin, s.logout},
		{"GET /dev/login", AccessLogin, s.loginForm},
		{"POST /dev/login", AccessLogin, s.login},
		{"POST /dev/logout", AccessLogin, s.logout},
		{"POST /v1/worker/lease", AccessWorker, s.workerLease},
		{"POST /v1/worker/heartbeat", AccessWorker, s.workerHeartbeat},
		{"GET /v1/worker/deployments/{id}/files", AccessWorker, s.workerFiles},
		{"POST /v1/worker/runs/{id}/started", AccessWorker, s.workerStarted},
		{"POST /v1/worker/runs/{id}/logs", AccessWorker, s.workerLogs},
		{"POST /v1/worker/runs/{id}/finish", AccessWorker, s.workerFinish},
		{"GET /v1/worker/runs/{id}/status", AccessWorker, s.workerStatus},
		{"GET /v1/worker/runs/{id}/secrets", AccessWorker, s.workerSecrets},
		{"GET /v1/worker/runs/{id}/build-secrets/{name}", AccessWorker, s.workerBuildSecret},
		{"POST /v1/worker/runs/{id}/waitpoints", AccessWorker, s.workerCreateWaitpoint},
		{"POST /v1/worker/runs/{id}/waits/{wp}", AccessWorker, s.workerBeginWait},
		{"GET /v1/worker/runs/{id}/waits/{wp}", AccessWorker, s.workerAwaitWaitpoint},
		{"POST /v1/worker/runs/{id}/waits/{wp}/end", AccessWorker, s.workerEndWait},
		{"GET /v1/worker/runs/{id}/session/input", AccessWorker, s.workerSessionInput},
		{"POST /v1/worker/runs/{id}/session/output", AccessWorker, s.workerAppendOutput},
		{"POST /v1/worker/runs/{id}/metadata", AccessWorker, s.workerSetMetadata},
		{"POST /v1/worker/runs/{id}/children", AccessWorker, s.workerTriggerChildren},
		{"POST /v1/worker/workspaces/deleted", AccessWorker, s.workerDeletedWorkspaces},
		{"POST /v1/worker/ops/next", AccessWorker, s.workerNextOp},
		{"POST /v1/worker/ops/{id}/result", AccessWorker, s.workerFinishOp},
		{"POST /v1/worker/ops/{id}/output", AccessWorker, s.workerOpOutput},
		{"GET /v1/worker/ops/{id}/data", AccessWorker, s.workerOpInput},
		{"PUT /v1/worker/ops/{id}/data", AccessWorker, s.workerOpDeliver},
		{"PUT /v1/worker/runs/{id}/checkpoints/{ck}", AccessWorker, s.workerPutCheckpoint},
		{"GET /v1/worker/runs/{id}/checkpoints/{ck}", AccessWorker, s.workerGetCheckpoint},
		{"POST /v1/worker/runs/{id}/checkpoints/{ck}/restored", AccessWorker, s.workerRestoredCheckpoint},
		{"POST /v1/worker/runs/{id}/park", AccessWorker, s.workerPark},
		{"PUT /v1/worker/workspaces/{id}/snapshots/{seq}", AccessWorker, s.workerPutSnapshot},
		{"GET /v1/worker/workspaces/{id}/snapshots/{seq}", AccessWorker, s.workerGetSnapshot},
		{"PUT /v1/worker/workspaces/{id}/checkpoints/{ck}", AccessWorker, s.workerPutWorkspaceCheckpoint},
		{"GET /v1/worker/workspaces/{id}/checkpoints/{ck}", AccessWorker, s.workerGetWorkspaceCheckpoint},
	}
}

// Routes lists the API's routes.
func (s *Server) Routes() []Route {
	var out []Route
	for _, r := range s.routes() {
		m, p, _ := strings.Cut(r.pattern, " ")
		out = append(out, Route{Method: m, Path: p, Access: r.access})
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

// scope reads the project environment a request names in its query
// (project is required, env defaults to "dev") and checks that the
// request's principal may act on it.
func scope(r *http.Request) (project, env string, err error) {
	q := r.URL.Query()
	project, env = q.Get("project"), q.Get("env")
	if !q.Has("env") {
		env = "dev"
	}
	if project == "" {
		return "", "", errdefs.Invalidf("the project query parameter is required")
	}
	if !deployments.ValidName(project) {
		return "", "", errdefs.Invalidf("project %q is not a valid name (1-128 letters, digits, '.', '_' or '-')", project)
	}
	if !deployments.ValidName(env) {
		return "", "", errdefs.Invalidf("env %q is not a valid name (1-128 letters, digits, '.', '_' or '-')", env)
	}
	if err := authorize(r.Context(), project, env); err != nil {
		return "", "", err
	}
	return project, env, nil
}
