package swerex

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// A bash session is the shell state carried from one command to the
// next: its working directory and exported environment (each command
// runs in a fresh bash in the workspace's sandbox). Unexported variables,
// functions and background jobs do not carry over. Commands sent to one
// session at once run at once: each starts from the state the session
// had when it began, and the session keeps the state of the last to end.

// session is a session's state, which concurrent commands read and
// replace as a whole under mu.
type session struct {
	mu    sync.Mutex
	state state
}

// state is what one command leaves the next: never changed once made, so
// a command reads it outside the lock.
type state struct {
	cwd string
	env map[string]string
}

func (s *session) get() state {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func (s *session) set(st state) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = st
}

func (a *API) createSession(r *http.Request, ws workspaces.Workspace, rt *runtime) (any, error) {
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
		return nil, errdefs.Invalidf("session_type %q: only bash sessions exist", req.SessionType)
	}
	rt.mu.Lock()
	_, exists := rt.sessions[req.Session]
	rt.mu.Unlock()
	if exists {
		return nil, &swerexError{"swerex.exceptions.SessionExistsError", "session " + req.Session + " already exists"}
	}
	sess := &session{}
	var cmd strings.Builder
	for _, f := range req.StartupSource {
		fmt.Fprintf(&cmd, "source %s\n", shellQuote(f))
	}
	// 0 (a negative startup timeout) is the default exec timeout.
	timeout := max(0, min(req.StartupTimeout+30, workspaces.MaxExecTimeout))
	obs, err := a.run(r.Context(), ws, sess, cmd.String(), timeout)
	if err != nil {
		return nil, err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, exists := rt.sessions[req.Session]; exists {
		return nil, &swerexError{"swerex.exceptions.SessionExistsError", "session " + req.Session + " already exists"}
	}
	rt.sessions[req.Session] = sess
	return map[string]any{"output": obs.output, "session_type": "bash"}, nil
}

func (a *API) runInSession(r *http.Request, ws workspaces.Workspace, rt *runtime) (any, error) {
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
	}{Session: "default", Check: "raise", ActionType: "bash"}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	rt.mu.Lock()
	sess, ok := rt.sessions[req.Session]
	rt.mu.Unlock()
	if !ok {
		return nil, &swerexError{"swerex.exceptions.SessionDoesNotExistError", fmt.Sprintf("session %q does not exist", req.Session)}
	}
	switch req.ActionType {
	case "bash_interrupt":
		// Each command is its own process, ended when it ends or at its
		// timeout: nothing runs between commands to interrupt.
		return map[string]any{"output": "", "exit_code": 0, "failure_reason": "", "expect_string": "", "session_type": "bash"}, nil
	case "bash":
	default:
		return nil, errdefs.Invalidf("action_type %q: bash or bash_interrupt", req.ActionType)
	}
	if req.Interactive || req.Quit {
		return nil, &swerexError{"swerex.exceptions.SwerexException", "interactive commands are not supported by Helmr's SWE-ReX runtime: each command runs to its end"}
	}
	timeout := float64(workspaces.MaxExecTimeout)
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = min(*req.Timeout, timeout)
	}
	obs, err := a.run(r.Context(), ws, sess, req.Command, timeout)
	if err != nil {
		return nil, err
	}
	var code any = obs.code
	switch {
	case req.Check == "ignore":
		code = nil
	case req.Check == "raise" && obs.code != 0:
		msg := fmt.Sprintf("Command %s failed with exit code %d. Here is the output:\n%s", pyRepr(req.Command), obs.code, pyRepr(obs.output))
		if req.ErrorMsg != "" {
			msg = req.ErrorMsg + ": " + msg
		}
		return nil, &swerexError{"swerex.exceptions.NonZeroExitCodeError", msg}
	}
	return map[string]any{"output": obs.output, "exit_code": code, "failure_reason": "", "expect_string": "", "session_type": "bash"}, nil
}

type observation struct {
	output string
	code   int
}

// run runs command in a fresh bash in the workspace with the session's
// directory and environment, and takes the directory and environment it
// ends with into the session.
func (a *API) run(ctx context.Context, ws workspaces.Workspace, sess *session, command string, timeout float64) (observation, error) {
	mark := make([]byte, 12)
	_, _ = rand.Read(mark)
	marker := "__HELMR_SWEREX_" + hex.EncodeToString(mark) + "__"
	st := sess.get()
	var b strings.Builder
	b.WriteString("exec 2>&1\n")
	if st.cwd != "" {
		fmt.Fprintf(&b, "cd %s 2>/dev/null\n", shellQuote(st.cwd))
	}
	keys := make([]string, 0, len(st.env))
	for k := range st.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(st.env[k]))
	}
	b.WriteString(command)
	fmt.Fprintf(&b, "\n__helmr_rc=$?\nprintf '\\n%s\\n%%s\\n' \"$__helmr_rc\"\npwd\nenv -0\n", marker)
	res, err := a.ws.Exec(ctx, ws, workspaces.ExecRequest{Argv: []string{"bash", "-c", b.String()}, TimeoutSeconds: timeout},
		workspaces.Trace{Kind: "swerex.run_in_session", Request: map[string]any{"command": command, "timeout": timeout}})
	if err != nil {
		return observation{}, err
	}
	if res.TimedOut {
		return observation{}, &swerexError{"swerex.exceptions.CommandTimeoutError",
			fmt.Sprintf("timeout after %g seconds while running command %s", timeout, pyRepr(command))}
	}
	out, rest, found := strings.Cut(res.Stdout, "\n"+marker+"\n")
	if !found { // the command ended the shell (exit): no state to keep
		return observation{output: strings.TrimSuffix(res.Stdout, "\n"), code: res.ExitCode}, nil
	}
	rc, rest, _ := strings.Cut(rest, "\n")
	cwd, envs, _ := strings.Cut(rest, "\n")
	code := 0
	fmt.Sscanf(rc, "%d", &code)
	next := state{cwd: cwd, env: map[string]string{}}
	for _, kv := range strings.Split(envs, "\x00") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !workspaces.ValidEnvName(k) {
			continue
		}
		switch k {
		case "PWD", "OLDPWD", "SHLVL", "_", "__helmr_rc":
			continue
		}
		next.env[k] = v
	}
	sess.set(next)
	return observation{output: out, code: code}, nil
}

func (a *API) closeSession(r *http.Request, _ workspaces.Workspace, rt *runtime) (any, error) {
	req := struct {
		Session string `json:"session"`
	}{Session: "default"}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.sessions[req.Session]; !ok {
		return nil, &swerexError{"swerex.exceptions.SessionDoesNotExistError", fmt.Sprintf("session %q does not exist", req.Session)}
	}
	delete(rt.sessions, req.Session)
	return map[string]any{"session_type": "bash"}, nil
}

func (a *API) execute(r *http.Request, ws workspaces.Workspace, _ *runtime) (any, error) {
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
		script += "cd " + shellQuote(cwd) + " || exit 1\n"
	}
	if argv != nil {
		return append([]string{"sh", "-c", script + `exec "$@"`, "sh"}, argv...), nil
	}
	return []string{"sh", "-c", script + str}, nil
}
