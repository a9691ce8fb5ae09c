package agent

import (
	"context"
	"fmt"
	"strings"

	"github.com/helmr/helmr/internal/sandbox"
)

// Shell performs one request on a guest shell session (sandbox.Shells)
// and waits for its answer. req.Cwd must already be resolved. Cancelling
// ctx stops the wait, not the request: a run's command goes on in its
// session. Errors wrap sandbox.ErrNoShell, sandbox.ErrShellExists or, for
// a lost agent or a failure in the guest, sandbox.ErrGuestRuntime; a
// malformed request is refused before it is sent.
func (c *Client) Shell(ctx context.Context, req sandbox.ShellRequest) (sandbox.ShellResult, error) {
	if err := ValidateShell(req); err != nil {
		return sandbox.ShellResult{}, err
	}
	id, q, err := c.register(0)
	if err != nil {
		return sandbox.ShellResult{}, err
	}
	defer c.unregister(id)
	err = c.w.Send(&Shell{
		ID: id, Op: req.Op, Name: req.Name, Env: req.Env, Cwd: req.Cwd, UID: req.UID, GID: req.GID,
		StartupSource: req.StartupSource, Command: req.Command, Timeout: int64(req.Timeout),
		Retries: req.Retries, MaxOutput: req.MaxOutput,
	})
	if err != nil {
		return sandbox.ShellResult{}, fmt.Errorf("%w: send shell %s: %w", sandbox.ErrGuestRuntime, req.Op, err)
	}
	for {
		select {
		case <-ctx.Done():
			return sandbox.ShellResult{}, fmt.Errorf("shell %s %q: %w", req.Op, req.Name, ctx.Err())
		case <-q.Ready():
		}
		items, closed, qerr := q.Drain()
		for _, m := range items {
			if r, ok := m.(*ShellResult); ok {
				return shellResult(req, r)
			}
		}
		if closed {
			return sandbox.ShellResult{}, fmt.Errorf("%w: shell %s %q: the agent connection ended: %w", sandbox.ErrGuestRuntime, req.Op, req.Name, qerr)
		}
	}
}

func shellResult(req sandbox.ShellRequest, r *ShellResult) (sandbox.ShellResult, error) {
	if r.Error != "" {
		var kind error
		switch r.ErrorCode {
		case ShellNoSession:
			kind = sandbox.ErrNoShell
		case ShellExists:
			kind = sandbox.ErrShellExists
		case ShellInvalid:
			return sandbox.ShellResult{}, fmt.Errorf("shell %s %q: %s", req.Op, req.Name, r.Error)
		default:
			kind = sandbox.ErrGuestRuntime
		}
		return sandbox.ShellResult{}, fmt.Errorf("shell %s %q: %w: %s", req.Op, req.Name, kind, r.Error)
	}
	return sandbox.ShellResult{
		Output: r.Output, OutputCut: r.OutputCut, ExitCode: r.ExitCode, TimedOut: r.TimedOut,
		SyntaxError: r.SyntaxError, SyntaxStderr: r.SyntaxStderr, Exited: r.Exited,
	}, nil
}

// Bounds of a shell request.
const (
	maxShellName    = 256
	maxStartupFiles = 64
)

// ValidateShell checks a shell request's shape (the agent checks it
// again): a known op, a name, bounds on what it carries.
func ValidateShell(req sandbox.ShellRequest) error {
	var problem string
	switch {
	case req.Op != sandbox.ShellOpen && req.Op != sandbox.ShellRun &&
		req.Op != sandbox.ShellInterrupt && req.Op != sandbox.ShellClose:
		problem = fmt.Sprintf("unknown op %q", req.Op)
	case req.Name == "" || len(req.Name) > maxShellName:
		problem = fmt.Sprintf("a session name is 1 to %d bytes", maxShellName)
	case req.Timeout < 0 || req.Retries < 0 || req.MaxOutput < 0:
		problem = "timeout, retries and max output cannot be negative"
	case req.MaxOutput > MaxShellOutput:
		problem = fmt.Sprintf("max output %d exceeds %d", req.MaxOutput, MaxShellOutput)
	case len(req.StartupSource) > maxStartupFiles:
		problem = fmt.Sprintf("at most %d startup files", maxStartupFiles)
	case req.Op == sandbox.ShellOpen && strings.IndexByte(req.Cwd, 0) >= 0:
		problem = "cwd holds a NUL byte"
	}
	for _, p := range req.StartupSource {
		if p == "" || strings.ContainsAny(p, "\n\x00") {
			problem = fmt.Sprintf("startup file %q: empty, or holds a newline or NUL", p)
		}
	}
	if problem != "" {
		return fmt.Errorf("shell %s %q: %s", req.Op, req.Name, problem)
	}
	return nil
}
