package swerex

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/helmr/helmr/internal/workspaces"
)

func (a *API) execute(r *http.Request, ws workspaces.Workspace) (any, error) {
	var req struct {
		Command  json.RawMessage   `json:"command"`
		Timeout  *float64          `json:"timeout"`
		Shell    bool              `json:"shell"`
		Check    bool              `json:"check"`
		ErrorMsg string            `json:"error_msg"`
		Env      map[string]string `json:"env"`
		Cwd      *string           `json:"cwd"`
		Merge    bool              `json:"merge_output_streams"`
	}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	cwd := ""
	if req.Cwd != nil {
		cwd = *req.Cwd
	}
	argv, err := executeArgv(req.Command, req.Shell, cwd, req.Merge)
	if err != nil {
		return nil, err
	}
	exec := workspaces.ExecRequest{Argv: argv, Env: req.Env, TimeoutSeconds: workspaces.MaxExecTimeout}
	if req.Timeout != nil && *req.Timeout > 0 {
		exec.TimeoutSeconds = min(*req.Timeout, workspaces.MaxExecTimeout)
	}
	res, err := a.ws.Exec(r.Context(), ws, exec, workspaces.Trace{Kind: "swerex.execute"})
	if err != nil {
		return nil, err
	}
	if name, ok := notFound(res); ok {
		return nil, &swerexError{"builtins.FileNotFoundError", "[Errno 2] No such file or directory: " + pyRepr(name)}
	}
	if res.TimedOut {
		return nil, &swerexError{"swerex.exceptions.CommandTimeoutError", fmt.Sprintf("Timeout (%gs) exceeded while running command", exec.TimeoutSeconds)}
	}
	if req.Check && res.ExitCode != 0 {
		msg := fmt.Sprintf("Command %s failed with exit code %d. Stdout:\n%s\nStderr:\n%s", string(req.Command), res.ExitCode, pyRepr(res.Stdout), pyRepr(res.Stderr))
		if req.ErrorMsg != "" {
			msg = req.ErrorMsg + ": " + msg
		}
		return nil, &swerexError{"swerex.exceptions.NonZeroExitCodeError", msg}
	}
	return map[string]any{"stdout": res.Stdout, "stderr": res.Stderr, "exit_code": res.ExitCode}, nil
}

// executeArgv is the argv that runs an execute request's command (a
// string, or a list of strings) as subprocess.run would: one sh runs it,
// in cwd (absolute, as subprocess's cwd) if given, with the streams
// merged if asked.
func executeArgv(command json.RawMessage, shell bool, cwd string, merge bool) ([]string, error) {
	var argv []string
	var str string
	if err := json.Unmarshal(command, &argv); err != nil {
		if err := json.Unmarshal(command, &str); err != nil || str == "" {
			return nil, &schemaError{"command must be a string or a list of strings"}
		}
	}
	if argv != nil && shell {
		str, argv = strings.Join(argv, " "), nil
	}
	if argv == nil && !shell {
		argv = []string{str} // as subprocess.run does with a string and shell=False
	}
	if len(argv) == 0 && str == "" {
		return nil, &schemaError{"command is empty"}
	}
	script := ""
	if merge {
		script += "exec 2>&1\n"
	}
	if cwd != "" {
		// subprocess.run's cwd that is not there: FileNotFoundError.
		script += "cd " + shellQuote(cwd) + " 2>/dev/null || { printf '" + enoent + "%s\\n' " + shellQuote(cwd) + "; exit 127; }\n"
	}
	if argv != nil {
		// An executable that is not there: FileNotFoundError, as
		// subprocess.run raises, not a shell's 127.
		script += `command -v -- "$1" >/dev/null 2>&1 || { printf '` + enoent + `%s\n' "$1"; exit 127; }` + "\n"
		return append([]string{"sh", "-c", script + `exec "$@"`, "sh"}, argv...), nil
	}
	return []string{"sh", "-c", script + str}, nil
}

// enoent starts what executeArgv's script prints, and nothing else, when
// the command's executable or directory is not there.
const enoent = "__helmr_enoent__:"

// notFound reports whether res is executeArgv's script saying that name
// (the executable or the directory) is not there.
func notFound(res workspaces.ExecResult) (string, bool) {
	if res.ExitCode != 127 {
		return "", false
	}
	out := strings.TrimSuffix(res.Stdout+res.Stderr, "\n")
	if !strings.HasPrefix(out, enoent) || strings.Contains(out, "\n") {
		return "", false
	}
	return strings.TrimPrefix(out, enoent), true
}
