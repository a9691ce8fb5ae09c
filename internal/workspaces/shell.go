package workspaces

import (
	"context"
	"regexp"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

// Shell sessions are long-lived shells in a workspace's sandbox (a bash
// the guest agent holds, see sandbox.Shells), which SWE-ReX's sessions
// are. A request on one is a direct operation like an exec: any replica
// queues it, the worker that holds the workspace's sandbox serves it, so
// a session is reachable from every replica and lives as long as that
// sandbox (or until it is closed, or idle past the worker's
// HELMR_SHELL_IDLE).

// Shell request operations (ShellRequest.Op).
const (
	ShellOpen      = "open"
	ShellRun       = "run"
	ShellInterrupt = "interrupt"
	ShellClose     = "close"
	// ShellCloseAll closes every session of the workspace (Session unused).
	ShellCloseAll = "close_all"
)

// ShellRequest is a request on a shell session of a workspace.
type ShellRequest struct {
	Op      string `json:"op"`
	Session string `json:"session,omitempty"`
	// StartupSource (open) are files the shell sources before it serves.
	StartupSource []string `json:"startupSource,omitempty"`
	// Command (run) is the command as typed: any number of lines. It may
	// refer to vault secrets (${vault:NAME}) as an exec's command does.
	Command string `json:"command,omitempty"`
	// TimeoutSeconds bounds a run (0: MaxExecTimeout) or each try of an
	// interrupt (0: 1 s).
	TimeoutSeconds float64 `json:"timeoutSeconds,omitempty"`
	// Retries (interrupt) is how many interrupts to try (0: 3).
	Retries int `json:"retries,omitempty"`
}

// ShellResult answers a ShellRequest: see sandbox.ShellResult. Output is
// text, bytes that are not UTF-8 written as \xNN (as SWE-ReX's sessions
// decode their terminal), redacted.
type ShellResult struct {
	Output       string `json:"output"`
	OutputCut    int64  `json:"outputCut,omitempty"`
	ExitCode     int    `json:"exitCode"`
	TimedOut     bool   `json:"timedOut,omitempty"`
	SyntaxError  bool   `json:"syntaxError,omitempty"`
	SyntaxStderr string `json:"syntaxStderr,omitempty"`
	Exited       bool   `json:"exited,omitempty"`
	// Missing: the session does not exist (run, interrupt, close); Exists:
	// open found one of that name.
	Missing bool `json:"missing,omitempty"`
	Exists  bool `json:"exists,omitempty"`
}

var sessionName = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,128}$`)

// Validate checks a shell request before it goes to a worker.
func (req ShellRequest) Validate() error {
	switch req.Op {
	case ShellOpen, ShellRun, ShellInterrupt, ShellClose:
		if !sessionName.MatchString(req.Session) {
			return errdefs.Invalidf("session %q: 1 to 128 letters, digits and _.:@-", req.Session)
		}
	case ShellCloseAll:
	default:
		return errdefs.Invalidf("shell op %q: open, run, interrupt, close or close_all", req.Op)
	}
	switch {
	case req.TimeoutSeconds < 0 || req.TimeoutSeconds > MaxExecTimeout:
		return errdefs.Invalidf("timeoutSeconds must be 0 to %d", MaxExecTimeout)
	case req.Retries < 0 || req.Retries > 100:
		return errdefs.Invalidf("retries must be 0 to 100")
	case len(req.Command) > MaxStdinBytes:
		return errdefs.TooLargef("a command is at most %d bytes", MaxStdinBytes)
	case len(req.StartupSource) > 64:
		return errdefs.Invalidf("at most 64 startup files")
	}
	return nil
}

// Timeout is how long the request may take in the sandbox.
func (req ShellRequest) Timeout() time.Duration {
	switch {
	case req.Op == ShellRun && req.TimeoutSeconds == 0:
		return MaxExecTimeout * time.Second
	case req.Op == ShellInterrupt:
		try := req.TimeoutSeconds
		if try == 0 {
			try = 1
		}
		retries := req.Retries
		if retries == 0 {
			retries = 3
		}
		return time.Duration(float64(retries+2)*try*float64(time.Second)) + 5*time.Second
	case req.Op == ShellOpen:
		return time.Duration(req.TimeoutSeconds*float64(time.Second)) + 30*time.Second
	case req.TimeoutSeconds > 0:
		return time.Duration(req.TimeoutSeconds * float64(time.Second))
	}
	return 30 * time.Second
}

// exec is the request as vault references and traces see it.
func (req ShellRequest) exec() ExecRequest {
	return ExecRequest{Command: req.Command, TimeoutSeconds: req.TimeoutSeconds}
}

// WithSecrets returns req with every ${vault:NAME} in its command
// replaced by its value.
func (req ShellRequest) WithSecrets(values map[string]string) ShellRequest {
	req.Command = req.exec().WithSecrets(values).Command
	return req
}

// Shell performs a request on one of ws's shell sessions (a direct
// operation, on the worker that holds the workspace's sandbox; open
// starts that sandbox if it is not up). Errors as Exec's.
func (s *Service) Shell(ctx context.Context, ws Workspace, req ShellRequest, tr Trace) (res ShellResult, err error) {
	if err := req.Validate(); err != nil {
		return ShellResult{}, err
	}
	began := time.Now()
	defer func() {
		if tr.Kind == "" || req.Op == ShellCloseAll {
			return
		}
		if tr.Request == nil {
			tr.Request = req
		}
		s.record(ctx, ws, req.exec(), tr, began, ExecResult{ExitCode: res.ExitCode, Stdout: res.Output, TimedOut: res.TimedOut}, err)
	}()
	if ws.DeletedAt != nil {
		return ShellResult{}, errdefs.Conflictf("workspace %s was deleted", ws.ID)
	}
	if err := s.runs.WorkspaceFree(ctx, ws); err != nil {
		return ShellResult{}, err
	}
	task, err := s.Task(ctx, ws)
	if err != nil {
		return ShellResult{}, err
	}
	secrets, egress, err := s.secrets(ctx, ws, req.exec())
	if err != nil {
		return ShellResult{}, err
	}
	if ws.Host, err = s.runs.OperationHost(ctx, ws); err != nil {
		return ShellResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, req.Timeout()+opWait)
	defer cancel()
	opRes, err := s.ops.Do(ctx, Op{Workspace: ws, Task: task.Spec, DeploymentID: task.DeploymentID, Shell: &req, Secrets: secrets, Egress: egress})
	if err != nil {
		return ShellResult{}, errdefs.Newf(errdefs.ErrTimeout, "%w", err)
	}
	if opRes.Error != "" {
		return ShellResult{}, errdefs.Upstreamf("%s", Redact(opRes.Error, secrets))
	}
	if opRes.Shell == nil {
		return ShellResult{}, errdefs.Upstreamf("the worker answered a shell request with no result")
	}
	res = *opRes.Shell
	res.Output, res.SyntaxStderr = Redact(res.Output, secrets), Redact(res.SyntaxStderr, secrets)
	if ws.Host == "" && opRes.Host != "" {
		if err := s.store.UseWorkspace(ctx, ws.ID, ws.LastRunID, opRes.Host, time.Now()); err != nil {
			s.log.Error("record where a workspace is", "workspace_id", ws.ID, "err", err)
		}
	}
	return res, nil
}
