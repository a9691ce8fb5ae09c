package httpapi

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// A SWE-ReX remote runtime per workspace, at /v1/swerex/{id}: the routes,
// request and response shapes of SWE-ReX's server (swerex/server.py and
// swerex/runtime/abstract.py, swe-rex 1.4), so SWE-ReX's RemoteRuntime,
// and SWE-agent through it, drive a Helmr workspace unmodified:
// RemoteRuntime(host="http://CONTROL_PLANE/v1/swerex/ws_…",
// auth_token=API_KEY). Commands run as direct operations on the
// workspace. Errors SWE-ReX raises travel as its server sends them: 511
// with {"swerexception": {message, class_path, traceback, extra_info}}.
//
// A bash session is the shell state carried from one command to the
// next: its working directory and exported environment (each command
// runs in a fresh bash in the workspace's sandbox). Unexported variables,
// functions and background jobs do not carry over. Commands sent to one
// session at once run at once: each starts from the state the session
// had when it began, and the session keeps the state of the last to end.

// swerexMaxReplies is how many responses per workspace are kept for
// X-Request-ID replay (SWE-ReX's server keeps the last one).
const swerexMaxReplies = 64

type swerexRuntime struct {
	mu       sync.Mutex
	sessions map[string]*swerexSession
	replies  map[string]swerexReply
	order    []string
}

// swerexSession is a session's state, which concurrent commands read and
// replace as a whole under mu.
type swerexSession struct {
	mu    sync.Mutex
	state swerexState
}

// swerexState is what one command leaves the next: never changed once
// made, so a command reads it outside the lock.
type swerexState struct {
	cwd string
	env map[string]string
}

func (s *swerexSession) get() swerexState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func (s *swerexSession) set(st swerexState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = st
}

type swerexReply struct {
	status int
	body   []byte
}

// swerexError is an exception SWE-ReX's client re-raises.
type swerexError struct {
	class, message string
}

func (e *swerexError) Error() string { return e.message }

func (s *Server) swerexFor(id string) *swerexRuntime {
	v, _ := s.swerexes.LoadOrStore(id, &swerexRuntime{sessions: map[string]*swerexSession{}, replies: map[string]swerexReply{}})
	return v.(*swerexRuntime)
}

// swerex wraps a SWE-ReX endpoint: the workspace, X-Request-ID replay,
// and SWE-ReX's error shape.
func (s *Server) swerex(h func(r *http.Request, ws workspaces.Workspace, rt *swerexRuntime) (any, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		_, ws, err := s.requestWorkspace(r)
		if err != nil {
			return err
		}
		rt := s.swerexFor(ws.ID)
		reqID := r.Header.Get("X-Request-ID")
		if reqID != "" {
			rt.mu.Lock()
			rep, ok := rt.replies[reqID]
			rt.mu.Unlock()
			if ok {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(rep.status)
				_, err := w.Write(rep.body)
				return err
			}
		}
		out, err := h(r, ws, rt)
		status := http.StatusOK
		var se *swerexError
		switch {
		case errors.As(err, &se):
			status = 511
			out = map[string]any{"swerexception": map[string]any{
				"message": se.message, "class_path": se.class, "traceback": "", "extra_info": map[string]any{},
			}}
		case err != nil:
			return err // Helmr's own errors (not found, conflict, no worker) as the rest of the API sends them
		}
		body, err := json.Marshal(out)
		if err != nil {
			return err
		}
		if reqID != "" {
			rt.mu.Lock()
			if _, ok := rt.replies[reqID]; !ok {
				rt.order = append(rt.order, reqID)
				if len(rt.order) > swerexMaxReplies {
					delete(rt.replies, rt.order[0])
					rt.order = rt.order[1:]
				}
			}
			rt.replies[reqID] = swerexReply{status: status, body: body}
			rt.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, err = w.Write(body)
		return err
	}
}

// decodeSwerex reads a SWE-ReX request model, with its defaults already
// in v.
func decodeSwerex(r *http.Request, v any) error {
	const max = 2 * MaxFileBytes // a write_file's content, JSON-escaped
	data, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return errdefs.Invalidf("read the request body: %v", err)
	}
	if len(data) > max {
		return errdefs.TooLargef("a request body is at most %d bytes", max)
	}
	if len(bytes.TrimSpace(data)) == 0 || string(bytes.TrimSpace(data)) == "null" {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return &Error{Status: http.StatusUnprocessableEntity, Code: "invalid_request", Message: "the body does not match the SWE-ReX request: " + err.Error()}
	}
	return nil
}

func (s *Server) swerexIsAlive(r *http.Request, ws workspaces.Workspace, _ *swerexRuntime) (any, error) {
	if ws.DeletedAt != nil {
		return map[string]any{"is_alive": false, "message": "workspace " + ws.ID + " was deleted"}, nil
	}
	return map[string]any{"is_alive": true, "message": ""}, nil
}

func (s *Server) swerexCreateSession(r *http.Request, ws workspaces.Workspace, rt *swerexRuntime) (any, error) {
	req := struct {
		StartupSource  []string `json:"startup_source"`
		Session        string   `json:"session"`
		SessionType    string   `json:"session_type"`
		StartupTimeout float64  `json:"startup_timeout"`
	}{Session: "default", SessionType: "bash", StartupTimeout: 1}
	if err := decodeSwerex(r, &req); err != nil {
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
	sess := &swerexSession{}
	var cmd strings.Builder
	for _, f := range req.StartupSource {
		fmt.Fprintf(&cmd, "source %s\n", shellQuote(f))
	}
	obs, err := s.swerexRun(r, ws, sess, cmd.String(), req.StartupTimeout+30)
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

func (s *Server) swerexRunInSession(r *http.Request, ws workspaces.Workspace, rt *swerexRuntime) (any, error) {
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
	if err := decodeSwerex(r, &req); err != nil {
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
	obs, err := s.swerexRun(r, ws, sess, req.Command, timeout)
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

type swerexObs struct {
	output string
	code   int
}

// swerexRun runs command in a fresh bash in the workspace with the
// session's directory and environment, and takes the directory and
// environment it ends with into the session.
func (s *Server) swerexRun(r *http.Request, ws workspaces.Workspace, sess *swerexSession, command string, timeout float64) (swerexObs, error) {
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
	res, err := s.execIn(r.Context(), s.cfg.Workspaces, ws, workspaces.ExecRequest{Argv: []string{"bash", "-c", b.String()}, TimeoutSeconds: timeout},
		opTrace{kind: "swerex.run_in_session", request: map[string]any{"command": command, "timeout": timeout}})
	if err != nil {
		return swerexObs{}, err
	}
	if res.TimedOut {
		return swerexObs{}, &swerexError{"swerex.exceptions.CommandTimeoutError",
			fmt.Sprintf("timeout after %g seconds while running command %s", timeout, pyRepr(command))}
	}
	out, state, found := strings.Cut(res.Stdout, "\n"+marker+"\n")
	if !found { // the command ended the shell (exit): no state to keep
		return swerexObs{output: strings.TrimSuffix(res.Stdout, "\n"), code: res.ExitCode}, nil
	}
	rc, rest, _ := strings.Cut(state, "\n")
	cwd, envs, _ := strings.Cut(rest, "\n")
	code := 0
	fmt.Sscanf(rc, "%d", &code)
	next := swerexState{cwd: cwd, env: map[string]string{}}
	for _, kv := range strings.Split(envs, "\x00") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !envName.MatchString(k) {
			continue
		}
		switch k {
		case "PWD", "OLDPWD", "SHLVL", "_", "__helmr_rc":
			continue
		}
		next.env[k] = v
	}
	sess.set(next)
	return swerexObs{output: out, code: code}, nil
}

func (s *Server) swerexCloseSession(r *http.Request, _ workspaces.Workspace, rt *swerexRuntime) (any, error) {
	req := struct {
		Session string `json:"session"`
	}{Session: "default"}
	if err := decodeSwerex(r, &req); err != nil {
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

func (s *Server) swerexExecute(r *http.Request, ws workspaces.Workspace, _ *swerexRuntime) (any, error) {
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
	if err := decodeSwerex(r, &req); err != nil {
		return nil, err
	}
	var argv []string
	var str string
	if err := json.Unmarshal(req.Command, &argv); err != nil {
		if err := json.Unmarshal(req.Command, &str); err != nil || str == "" {
			return nil, &Error{Status: http.StatusUnprocessableEntity, Code: "invalid_request", Message: "command must be a string or a list of strings"}
		}
	}
	if argv != nil && req.Shell {
		str, argv = strings.Join(argv, " "), nil
	}
	if argv == nil && !req.Shell {
		argv = []string{str} // as subprocess.run does with a string and shell=False
	}
	if len(argv) == 0 && str == "" {
		return nil, &Error{Status: http.StatusUnprocessableEntity, Code: "invalid_request", Message: "command is empty"}
	}
	// One sh runs it: in cwd (absolute, as subprocess's cwd), with the
	// streams merged if asked.
	script := ""
	if req.Merge {
		script += "exec 2>&1\n"
	}
	if req.Cwd != nil && *req.Cwd != "" {
		script += "cd " + shellQuote(*req.Cwd) + " || exit 1\n"
	}
	exec := workspaces.ExecRequest{Env: req.Env, TimeoutSeconds: workspaces.MaxExecTimeout}
	if req.Timeout != nil && *req.Timeout > 0 {
		exec.TimeoutSeconds = min(*req.Timeout, workspaces.MaxExecTimeout)
	}
	if argv != nil {
		exec.Argv = append([]string{"sh", "-c", script + `exec "$@"`, "sh"}, argv...)
	} else {
		exec.Argv = []string{"sh", "-c", script + str}
	}
	if err := checkExec(exec); err != nil {
		return nil, errdefs.Invalidf("%w", err)
	}
	res, err := s.execIn(r.Context(), s.cfg.Workspaces, ws, exec, opTrace{kind: "swerex.execute"})
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

func (s *Server) swerexReadFile(r *http.Request, ws workspaces.Workspace, _ *swerexRuntime) (any, error) {
	var req struct {
		Path string `json:"path"`
	}
	if err := decodeSwerex(r, &req); err != nil {
		return nil, err
	}
	if req.Path == "" {
		return nil, &Error{Status: http.StatusUnprocessableEntity, Code: "invalid_request", Message: "path is required"}
	}
	res, err := s.execOutput(r.Context(), s.cfg.Workspaces, ws, workspaces.ExecRequest{Argv: []string{"base64", "-w0", "--", req.Path}},
		opTrace{kind: "swerex.read_file", request: map[string]any{"path": req.Path}}, maxFileBase64, fmt.Sprintf("%s is larger than %d bytes: read it in parts with execute", req.Path, MaxFileBytes))
	if errors.Is(err, errdefs.ErrTooLarge) {
		return nil, &swerexError{"swerex.exceptions.SwerexException", err.Error()}
	}
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, &swerexError{"builtins.FileNotFoundError", strings.TrimSpace(res.Stderr)}
	}
	data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(res.Stdout))
	if err != nil {
		return nil, errdefs.Upstreamf("%s came back garbled: %v", req.Path, err)
	}
	return map[string]any{"content": string(data)}, nil
}

func (s *Server) swerexWriteFile(r *http.Request, ws workspaces.Workspace, _ *swerexRuntime) (any, error) {
	var req struct {
		Content *string `json:"content"`
		Path    string  `json:"path"`
	}
	if err := decodeSwerex(r, &req); err != nil {
		return nil, err
	}
	if req.Content == nil || req.Path == "" {
		return nil, &Error{Status: http.StatusUnprocessableEntity, Code: "invalid_request", Message: "content and path are required"}
	}
	if err := s.swerexPut(r, ws, req.Path, []byte(*req.Content)); err != nil {
		return nil, err
	}
	return map[string]any{}, nil
}

// swerexPut writes data to p in the workspace's sandbox, making its
// directory.
func (s *Server) swerexPut(r *http.Request, ws workspaces.Workspace, p string, data []byte) error {
	if len(data) > MaxFileBytes {
		return errdefs.TooLargef("%s: %d bytes, more than the %d one write takes", p, len(data), MaxFileBytes)
	}
	res, err := s.execStdin(r.Context(), s.cfg.Workspaces, ws, workspaces.ExecRequest{
		Argv:  []string{"sh", "-c", `mkdir -p "$(dirname "$1")" && base64 -d > "$1"`, "sh", p},
		Stdin: base64.StdEncoding.EncodeToString(data),
	}, opTrace{kind: "swerex.write_file", request: map[string]any{"path": p, "bytes": len(data)}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return &swerexError{"builtins.OSError", strings.TrimSpace(res.Stderr)}
	}
	return nil
}

// swerexUpload takes SWE-ReX's multipart upload: a file (or a zip of a
// directory, unzip=true) written to target_path.
func (s *Server) swerexUpload(r *http.Request, ws workspaces.Workspace, _ *swerexRuntime) (any, error) {
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		return nil, &Error{Status: http.StatusUnprocessableEntity, Code: "invalid_request", Message: "the body must be a multipart form with file and target_path: " + err.Error()}
	}
	target := r.FormValue("target_path")
	f, _, err := r.FormFile("file")
	if err != nil || target == "" {
		return nil, &Error{Status: http.StatusUnprocessableEntity, Code: "invalid_request", Message: "file and target_path are required"}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, errdefs.TooLargef("an upload is at most %d bytes", MaxFileBytes)
	}
	if r.FormValue("unzip") != "true" && r.FormValue("unzip") != "True" {
		return map[string]any{}, s.swerexPut(r, ws, target, data)
	}
	tarData, err := zipToTar(data)
	if err != nil {
		return nil, err
	}
	// One operation unpacks the whole directory (as a tar: the sandbox's
	// image need not have unzip).
	res, err := s.execStdin(r.Context(), s.cfg.Workspaces, ws, workspaces.ExecRequest{
		Argv:  []string{"sh", "-c", `mkdir -p -- "$1" && base64 -d | tar -C "$1" -xf - --no-same-owner --no-same-permissions`, "sh", target},
		Stdin: base64.StdEncoding.EncodeToString(tarData),
	}, opTrace{kind: "swerex.upload", request: map[string]any{"target_path": target, "unzip": true, "bytes": len(data)}})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, &swerexError{"builtins.OSError", strings.TrimSpace(res.Stderr)}
	}
	return map[string]any{}, nil
}

// zipToTar turns an uploaded zip into a tar of its directories and files
// (a symlink member becomes a file holding its target, as Python's
// zipfile extracts it), names kept inside the target directory, at most
// MaxFileBytes unpacked.
func zipToTar(data []byte) ([]byte, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, &swerexError{"zipfile.BadZipFile", err.Error()}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	total := int64(0)
	for _, zf := range zr.File {
		name := path.Clean(strings.TrimPrefix(zf.Name, "./"))
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || strings.ContainsRune(name, 0) {
			return nil, &swerexError{"zipfile.BadZipFile", fmt.Sprintf("%s leaves the target directory", zf.Name)}
		}
		if name == "." {
			continue
		}
		if zf.FileInfo().IsDir() {
			if err := tw.WriteHeader(&tar.Header{Name: name + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: zf.Modified}); err != nil {
				return nil, err
			}
			continue
		}
		rc, err := zf.Open()
		if err != nil {
			return nil, &swerexError{"zipfile.BadZipFile", err.Error()}
		}
		content, err := io.ReadAll(io.LimitReader(rc, MaxFileBytes-total+1))
		rc.Close()
		if err != nil {
			return nil, &swerexError{"zipfile.BadZipFile", fmt.Sprintf("%s: %v", zf.Name, err)}
		}
		if total += int64(len(content)); total > MaxFileBytes {
			return nil, errdefs.TooLargef("the zip unpacks to more than %d bytes", MaxFileBytes)
		}
		mode := int64(zf.Mode().Perm())
		if zf.Mode()&fs.ModeSymlink != 0 || mode == 0 {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(content)), Typeflag: tar.TypeReg, ModTime: zf.Modified}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (s *Server) swerexClose(_ *http.Request, _ workspaces.Workspace, rt *swerexRuntime) (any, error) {
	rt.mu.Lock()
	rt.sessions = map[string]*swerexSession{}
	rt.mu.Unlock()
	return map[string]any{}, nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pyRepr renders s roughly as Python's repr does, for messages that
// mirror SWE-ReX's.
func pyRepr(s string) string {
	q, _ := json.Marshal(s)
	return "'" + strings.ReplaceAll(strings.Trim(string(q), `"`), "'", `\'`) + "'"
}
