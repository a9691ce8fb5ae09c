package swerex

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// A SWE-ReX bash session is a shell session of the workspace (see
// workspaces.Service.Shell): a real bash the sandbox's guest agent holds
// on a terminal, so everything a shell keeps (working directory, cd -,
// variables exported or not, functions, aliases, options, jobs) carries
// from one command to the next, as in SWE-ReX's own runtime. It lives in
// the workspace's sandbox, not in this process: any replica reaches it,
// it survives a control-plane restart, and it ends with the sandbox, when
// closed, or when idle past the worker's HELMR_SHELL_IDLE.

// ps1 is the expect_string SWE-ReX's sessions answer (their prompt).
const ps1 = "SHELLPS1PREFIX"

func (a *API) createSession(r *http.Request, ws workspaces.Workspace) (any, error) {
	req := struct {
		StartupSource  []string `json:"startup_source"`
		Session        string   `json:"session"`
		SessionType    string   `json:"session_type"`
		StartupTimeout float64  `json:"startup_timeout"`
	}{Session: "default", SessionType: "bash", StartupTimeout: 1}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if req.SessionType != "bash" {
		return nil, &schemaError{fmt.Sprintf("session_type %q: only bash sessions exist", req.SessionType)}
	}
	res, err := a.ws.Shell(r.Context(), ws, workspaces.ShellRequest{
		Op: workspaces.ShellOpen, Session: req.Session, StartupSource: req.StartupSource,
		TimeoutSeconds: min(max(req.StartupTimeout, 0), workspaces.MaxExecTimeout),
	}, workspaces.Trace{Kind: "swerex.create_session", Request: map[string]any{"session": req.Session, "startup_source": req.StartupSource}})
	if err != nil {
		return nil, err
	}
	switch {
	case res.Exists:
		return nil, &swerexError{class: "swerex.exceptions.SessionExistsError", message: "session " + req.Session + " already exists"}
	case res.TimedOut:
		// The startup still runs; the session exists, as in SWE-ReX.
		return nil, &swerexError{class: "pexpect.exceptions.TIMEOUT", message: "Timeout exceeded while the session started: " + res.Output}
	}
	return map[string]any{"output": res.Output, "session_type": "bash"}, nil
}

func noSession(name string) error {
	return &swerexError{class: "swerex.exceptions.SessionDoesNotExistError", message: fmt.Sprintf("session %s does not exist", pyRepr(name))}
}

func (a *API) runInSession(r *http.Request, ws workspaces.Workspace) (any, error) {
	req := struct {
		Command     string   `json:"command"`
		Session     string   `json:"session"`
		Timeout     *float64 `json:"timeout"`
		Interactive bool     `json:"is_interactive_command"`
		Quit        bool     `json:"is_interactive_quit"`
		Check       string   `json:"check"`
		ErrorMsg    string   `json:"error_msg"`
		Expect      []string `json:"expect"`
		ActionType  string   `json:"action_type"`
		NRetry      *int     `json:"n_retry"`
	}{Session: "default", Check: "raise", ActionType: "bash"}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	switch req.ActionType {
	case "bash_interrupt":
		return a.interrupt(r, ws, req.Session, req.Timeout, req.NRetry)
	case "bash":
	default:
		return nil, &schemaError{fmt.Sprintf("action_type %q: bash or bash_interrupt", req.ActionType)}
	}
	switch req.Check {
	case "raise", "silent", "ignore":
	default:
		return nil, &schemaError{fmt.Sprintf("check %q: raise, silent or ignore", req.Check)}
	}
	if req.Interactive || req.Quit {
		return nil, &swerexError{class: "swerex.exceptions.SwerexException", message: "interactive commands are not supported by Helmr's SWE-ReX runtime: each command runs to its prompt"}
	}
	timeout := 0.0 // SWE-ReX's default: no bound (here, MaxExecTimeout)
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = min(*req.Timeout, workspaces.MaxExecTimeout)
	}
	res, err := a.ws.Shell(r.Context(), ws, workspaces.ShellRequest{Op: workspaces.ShellRun, Session: req.Session, Command: req.Command, TimeoutSeconds: timeout},
		workspaces.Trace{Kind: "swerex.run_in_session", Request: map[string]any{"session": req.Session, "command": req.Command, "timeout": timeout}})
	if err != nil {
		return nil, err
	}
	switch {
	case res.Missing:
		return nil, noSession(req.Session)
	case res.SyntaxError:
		return nil, &withInfo{err: &swerexError{class: "swerex.exceptions.BashIncorrectSyntaxError",
			message: fmt.Sprintf("Error (exit code %d) while checking bash command \n%s\n---- Stderr ----\n%s\n---- Stdout ----\n%s",
				res.ExitCode, pyRepr(req.Command), res.SyntaxStderr, res.Output)},
			extra: map[string]any{"bash_stdout": res.Output, "bash_stderr": res.SyntaxStderr}}
	case res.TimedOut:
		shown := "None"
		if timeout > 0 {
			shown = fmt.Sprint(timeout)
		}
		return nil, &swerexError{class: "swerex.exceptions.CommandTimeoutError",
			message: fmt.Sprintf("timeout after %s seconds while running command %s", shown, pyRepr(req.Command))}
	}
	var code any = res.ExitCode
	switch {
	case req.Check == "ignore":
		code = nil
	case req.Check == "raise" && res.ExitCode != 0:
		msg := fmt.Sprintf("Command %s failed with exit code %d. Here is the output:\n%s", pyRepr(req.Command), res.ExitCode, pyRepr(res.Output))
		if req.ErrorMsg != "" {
			msg = req.ErrorMsg + ": " + msg
		}
		return nil, &swerexError{class: "swerex.exceptions.NonZeroExitCodeError", message: msg}
	}
	return map[string]any{"output": res.Output, "exit_code": code, "failure_reason": "", "expect_string": ps1, "session_type": "bash"}, nil
}

// interrupt answers a BashInterruptAction: ^C to the session's terminal,
// up to n_retry times (default 3), each waiting timeout (default 0.2 s)
// for the prompt, then suspending and killing the job.
func (a *API) interrupt(r *http.Request, ws workspaces.Workspace, session string, timeout *float64, nRetry *int) (any, error) {
	req := workspaces.ShellRequest{Op: workspaces.ShellInterrupt, Session: session, TimeoutSeconds: 0.2, Retries: 3}
	if timeout != nil && *timeout > 0 {
		req.TimeoutSeconds = min(*timeout, 60)
	}
	if nRetry != nil {
		if *nRetry < 1 || *nRetry > 100 {
			return nil, &schemaError{"n_retry must be 1 to 100"}
		}
		req.Retries = *nRetry
	}
	res, err := a.ws.Shell(r.Context(), ws, req, workspaces.Trace{Kind: "swerex.interrupt", Request: map[string]any{"session": session}})
	if err != nil {
		return nil, err
	}
	switch {
	case res.Missing:
		return nil, noSession(session)
	case res.TimedOut:
		return nil, &swerexError{class: "pexpect.exceptions.TIMEOUT", message: "Failed to interrupt session"}
	}
	return map[string]any{"output": res.Output, "exit_code": 0, "failure_reason": "", "expect_string": ps1, "session_type": "bash"}, nil
}

func (a *API) closeSession(r *http.Request, ws workspaces.Workspace) (any, error) {
	req := struct {
		Session     string `json:"session"`
		SessionType string `json:"session_type"`
	}{Session: "default"}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	res, err := a.ws.Shell(r.Context(), ws, workspaces.ShellRequest{Op: workspaces.ShellClose, Session: req.Session},
		workspaces.Trace{Kind: "swerex.close_session", Request: map[string]any{"session": req.Session}})
	if err != nil {
		return nil, err
	}
	if res.Missing {
		return nil, noSession(req.Session)
	}
	return map[string]any{"session_type": "bash"}, nil
}

// close answers SWE-ReX's close: every session of the runtime ends.
func (a *API) close(r *http.Request, ws workspaces.Workspace) (any, error) {
	if ws.DeletedAt != nil {
		return map[string]any{}, nil
	}
	if _, err := a.ws.Shell(r.Context(), ws, workspaces.ShellRequest{Op: workspaces.ShellCloseAll}, workspaces.Trace{}); err != nil && !errdefsIsBenign(err) {
		return nil, err
	}
	return map[string]any{}, nil
}

// errdefsIsBenign: closing the sessions of a workspace that a run holds
// now, or whose worker is gone, leaves nothing open to close.
func errdefsIsBenign(err error) bool {
	return errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrTimeout)
}
