package httpapi

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// workspaceStore returns the workspaces, or 503 when this control plane
// keeps none.
func (s *Server) workspaceStore() (workspaces.Store, error) {
	if s.cfg.Workspaces == nil {
		return nil, errdefs.Unavailablef("this control plane keeps no workspaces")
	}
	return s.cfg.Workspaces, nil
}

func (s *Server) listWorkspaces(w http.ResponseWriter, r *http.Request) error {
	st, err := s.workspaceStore()
	if err != nil {
		return err
	}
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	limit, err := intParam(r, "limit", 50)
	if err != nil {
		return err
	}
	list, err := st.ListWorkspaces(r.Context(), project, env, limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"workspaces": list})
}

// createWorkspace makes an empty workspace for a deployed task's sandbox;
// its files start, on first use, from what the task's image holds at the
// workspace path.
func (s *Server) createWorkspace(w http.ResponseWriter, r *http.Request) error {
	st, err := s.workspaceStore()
	if err != nil {
		return err
	}
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	var req workspaces.CreateRequest
	if err := decodeJSON(w, r, 64<<10, &req); err != nil {
		return err
	}
	var quota int64
	if req.Quota != "" {
		if quota, err = workspaces.ParseQuota(req.Quota); err != nil {
			return errdefs.Invalidf("%w", err)
		}
	}
	var task deployments.Task
	switch {
	case (req.Task == "") == (req.Sandbox == ""):
		return errdefs.Invalidf("give one of task (a deployed task whose sandbox the workspace uses) or sandbox (the name of a deployed sandbox)")
	case req.Task != "":
		if task, err = s.cfg.Deployments.GetTask(r.Context(), project, env, req.Task); err != nil {
			return err
		}
		if task.Spec.Sandbox == nil {
			return errdefs.Invalidf("task %s declares no sandbox", req.Task)
		}
	default:
		if !deployments.ValidName(req.Sandbox) {
			return errdefs.Invalidf("sandbox %q: names are 1-128 letters, digits, '.', '_' or '-'", req.Sandbox)
		}
		if task, err = s.sandboxTask(r.Context(), project, env, req.Sandbox); err != nil {
			return err
		}
	}
	if quota == 0 {
		quota, _ = deployments.ParseDisk("disk", task.Spec.Sandbox.Resources.Disk) // checked at deploy; 0 if none
	}
	ws, err := st.CreateWorkspace(r.Context(), workspaces.Workspace{Project: project, Env: env, TaskID: task.ID, Sandbox: task.Spec.Sandbox.Name, QuotaBytes: quota, CreatedAt: time.Now()})
	if err != nil {
		return err
	}
	s.log.Info("workspace created", "workspace_id", ws.ID, "project", project, "env", env, "task", ws.TaskID, "sandbox", ws.Sandbox, "quota_bytes", ws.QuotaBytes)
	return writeJSON(w, http.StatusCreated, ws)
}

// sandboxTask returns the first current task of project/env (by id) that
// references the sandbox named name; a deployment declares each sandbox
// name once, so any such task carries the same sandbox.
func (s *Server) sandboxTask(ctx context.Context, project, env, name string) (deployments.Task, error) {
	ts, err := s.cfg.Deployments.CurrentTasks(ctx, project, env)
	if err != nil {
		return deployments.Task{}, err
	}
	for _, t := range ts {
		if t.Spec.Sandbox != nil && t.Spec.Sandbox.Name == name {
			return t, nil
		}
	}
	return deployments.Task{}, errdefs.NotFoundf("no task deployed in %s/%s references a sandbox named %q", project, env, name)
}

// workspaceTask returns the deployed task whose sandbox a workspace's
// direct operations run in: its named sandbox, as the current deployment
// declares it (its own task if that still references it, else another
// that does), or, for a workspace without one, its task's.
func (s *Server) workspaceTask(ctx context.Context, ws workspaces.Workspace) (deployments.Task, error) {
	task, err := s.cfg.Deployments.GetTask(ctx, ws.Project, ws.Env, ws.TaskID)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return deployments.Task{}, err
	}
	if err == nil && (ws.Sandbox == "" || (task.Spec.Sandbox != nil && task.Spec.Sandbox.Name == ws.Sandbox)) {
		return task, nil
	}
	if ws.Sandbox == "" {
		return deployments.Task{}, errdefs.Conflictf("workspace %s runs in the sandbox of task %s, which %s/%s no longer deploys", ws.ID, ws.TaskID, ws.Project, ws.Env)
	}
	task, err = s.sandboxTask(ctx, ws.Project, ws.Env, ws.Sandbox)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return deployments.Task{}, errdefs.Conflictf("workspace %s runs in sandbox %s, which %s/%s no longer deploys", ws.ID, ws.Sandbox, ws.Project, ws.Env)
		}
		return deployments.Task{}, err
	}
	return task, nil
}

func (s *Server) getWorkspace(w http.ResponseWriter, r *http.Request) error {
	_, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ws)
}

// requestWorkspace is the workspace a request addresses by id, if it is
// in the request's scope (else not found, as a missing one), and the
// store that holds it.
func (s *Server) requestWorkspace(r *http.Request) (workspaces.Store, workspaces.Workspace, error) {
	st, err := s.workspaceStore()
	if err != nil {
		return nil, workspaces.Workspace{}, err
	}
	ws, err := st.GetWorkspace(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, ws, err
	}
	return st, ws, authorizeObject(r.Context(), ws.Project, ws.Env, fmt.Errorf("get workspace %s: %w", ws.ID, errdefs.ErrNotFound))
}

// deleteWorkspace marks a workspace deleted: no run may attach to it
// again, and the worker holding its files removes them. A workspace an
// unfinished run holds cannot be deleted.
func (s *Server) deleteWorkspace(w http.ResponseWriter, r *http.Request) error {
	st, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	if err := s.cfg.Runs.WorkspaceFree(r.Context(), ws); err != nil {
		return err
	}
	if err := st.DeleteWorkspace(r.Context(), ws.ID, time.Now()); err != nil {
		return err
	}
	if ws.Snapshot != nil && s.cfg.Blobs != nil {
		if err := s.cfg.Blobs.Delete(r.Context(), ws.Snapshot.BlobID); err != nil {
			s.log.Warn("delete a deleted workspace's snapshot", "workspace_id", ws.ID, "blob", ws.Snapshot.BlobID, "err", err)
		}
	}
	s.log.Info("workspace deleted", "workspace_id", ws.ID, "project", ws.Project, "env", ws.Env)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// opWait bounds how long an exec waits beyond its own timeout for a
// worker to take it and start the workspace's sandbox.
const opWait = 2 * time.Minute

// execWorkspace runs one command in a workspace (a direct operation):
// in a sandbox of the workspace's task, on a worker of its host, kept
// warm between operations. A workspace an unfinished run holds is a 409.
func (s *Server) execWorkspace(w http.ResponseWriter, r *http.Request) error {
	st, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	var req workspaces.ExecRequest
	if err := decodeJSON(w, r, workspaces.MaxStdinBytes+64<<10, &req); err != nil {
		return err
	}
	if err := checkExec(req); err != nil {
		return errdefs.Invalidf("%w", err)
	}
	res, err := s.execIn(r.Context(), st, ws, req, opTrace{kind: "exec"})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// execWorkspaceStream is execWorkspace answering as server-sent events:
// an "output" event ({stream, data}) per line as the command prints it,
// then one "result" event (the ExecResult), or an "error" event.
func (s *Server) execWorkspaceStream(w http.ResponseWriter, r *http.Request) error {
	st, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	var req workspaces.ExecRequest
	if err := decodeJSON(w, r, workspaces.MaxStdinBytes+64<<10, &req); err != nil {
		return err
	}
	if err := checkExec(req); err != nil {
		return errdefs.Invalidf("%w", err)
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return errors.New("streaming unsupported")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	var mu sync.Mutex
	event := func(name string, v any) {
		data, _ := json.Marshal(v)
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
		flusher.Flush()
	}
	res, err := s.execIn(r.Context(), st, ws, req, opTrace{kind: "exec.stream", output: func(stream string, data []byte) {
		event("output", workspaces.OpOutput{Stream: stream, Data: string(data)})
	}})
	if err != nil {
		he := toHTTP(err)
		event("error", map[string]any{"status": he.Status, "code": he.Code, "message": he.Message})
		return nil
	}
	event("result", res)
	return nil
}

// execIn runs a checked exec request in workspace ws through a worker of
// its host, and records the host of a workspace that had none.
func (s *Server) execIn(ctx context.Context, st workspaces.Store, ws workspaces.Workspace, req workspaces.ExecRequest, tr opTrace) (res workspaces.ExecResult, err error) {
	began := time.Now()
	defer func() { s.recordOp(ctx, ws, req, tr, began, res, err) }()
	if ws.DeletedAt != nil {
		return workspaces.ExecResult{}, errdefs.Conflictf("workspace %s was deleted", ws.ID)
	}
	if err := s.cfg.Runs.WorkspaceFree(ctx, ws); err != nil {
		return workspaces.ExecResult{}, err
	}
	task, err := s.workspaceTask(ctx, ws)
	if err != nil {
		return workspaces.ExecResult{}, err
	}
	secrets, err := s.vaultRefs(ctx, ws, req)
	if err != nil {
		return workspaces.ExecResult{}, err
	}
	// A workspace whose host is gone goes to any worker, which restores
	// its snapshot.
	if ws.Host, _, err = s.cfg.Runs.PlaceWorkspace(ctx, ws); err != nil {
		return workspaces.ExecResult{}, err
	}
	timeout := time.Duration(req.TimeoutSeconds * float64(time.Second))
	if timeout <= 0 {
		timeout = workspaces.DefaultExecTimeout * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+opWait)
	defer cancel()
	var output func(string, []byte)
	if tr.output != nil {
		output = func(stream string, data []byte) {
			tr.output(stream, []byte(workspaces.Redact(string(data), secrets)))
		}
	}
	opRes, err := s.cfg.Ops.DoStream(ctx, workspaces.Op{Workspace: ws, Task: task.Spec, DeploymentID: task.DeploymentID, Exec: &req, Secrets: secrets}, output)
	if err != nil {
		return workspaces.ExecResult{}, errdefs.Newf(errdefs.ErrTimeout, "%w", err)
	}
	if opRes.Error != "" {
		return workspaces.ExecResult{}, errdefs.Upstreamf("%s", workspaces.Redact(opRes.Error, secrets))
	}
	// The worker redacted already; a value never leaves here whatever a
	// worker sends.
	res = opRes.Exec.Redact(secrets)
	if ws.Host == "" && opRes.Host != "" {
		if err := st.UseWorkspace(ctx, ws.ID, ws.LastRunID, opRes.Host, time.Now()); err != nil {
			s.log.Error("record where a workspace is", "workspace_id", ws.ID, "err", err)
		}
	}
	return res, nil
}

// opTrace says how an operation appears in the workspace's trajectory:
// its kind, and the request the caller made (nil: the exec request).
type opTrace struct {
	kind    string
	request any
	// quiet leaves the operation out of the trajectory: a part of a
	// larger one, recorded as a whole.
	quiet bool
	// output, if set, streams the operation: it gets the output, line by
	// line and redacted, as the worker sends it.
	output func(stream string, data []byte)
}

// trajectoryOutput bounds each output stream as a trajectory keeps it.
const trajectoryOutput = 64 << 10

// recordOp appends an operation to the workspace's trajectory and exports
// its span. Requests hold credential placeholders, never values; results
// are redacted already.
func (s *Server) recordOp(ctx context.Context, ws workspaces.Workspace, req workspaces.ExecRequest, tr opTrace, began time.Time, res workspaces.ExecResult, err error) {
	if s.cfg.Trajectories == nil || tr.quiet {
		return
	}
	rec := workspaces.OpRecord{WorkspaceID: ws.ID, Kind: tr.kind, StartedAt: began, DurationMs: float64(time.Since(began).Microseconds()) / 1000}
	if tr.request == nil {
		tr.request = traceRequest(req)
	}
	rec.Request, _ = json.Marshal(tr.request)
	if err != nil {
		rec.Error = err.Error()
	} else {
		for _, out := range []*string{&res.Stdout, &res.Stderr} {
			if len(*out) > trajectoryOutput {
				*out = (*out)[:trajectoryOutput] + "\n[helmr: output cut in the trajectory]\n"
			}
		}
		rec.Result, _ = json.Marshal(res)
	}
	rec, aerr := s.cfg.Trajectories.AppendOp(context.WithoutCancel(ctx), rec)
	if aerr != nil {
		s.log.Error("record a workspace operation", "workspace_id", ws.ID, "err", aerr)
		return
	}
	s.cfg.Spans.Export(rec)
}

// traceRequest is an exec request as a trajectory keeps it: its stdin
// cut at 4 KiB.
func traceRequest(req workspaces.ExecRequest) workspaces.ExecRequest {
	if len(req.Stdin) > 4<<10 {
		req.Stdin = req.Stdin[:4<<10] + "[helmr: stdin cut in the trajectory]"
	}
	return req
}

// trajectory answers a workspace's operations, oldest first, from a
// cursor (after=SEQ).
func (s *Server) trajectory(w http.ResponseWriter, r *http.Request) error {
	_, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	if s.cfg.Trajectories == nil {
		return errdefs.Unavailablef("this control plane keeps no trajectories")
	}
	after, err := intParam(r, "after", 0)
	if err != nil {
		return err
	}
	limit, err := intParam(r, "limit", 1000)
	if err != nil {
		return err
	}
	ops, err := s.cfg.Trajectories.ListOps(r.Context(), ws.ID, int64(after), limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"workspaceId": ws.ID, "operations": ops})
}

// vaultRefs fetches the values of the vault secrets an exec request
// refers to (${vault:NAME}) from the workspace's project environment.
func (s *Server) vaultRefs(ctx context.Context, ws workspaces.Workspace, req workspaces.ExecRequest) (map[string]string, error) {
	if len(req.VaultNames()) == 0 {
		return nil, nil
	}
	if s.cfg.Vault == nil {
		return nil, errdefs.Unavailablef("the command refers to vault secrets, and this control plane has no vault")
	}
	out, err := workspaces.SecretsFor(ctx, s.cfg.Vault, ws, req)
	var se *workspaces.SecretError
	if errors.As(err, &se) && errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.Invalidf("${vault:%s}: no secret %s in %s/%s", se.Name, se.Name, ws.Project, ws.Env)
	}
	return out, err
}

// checkExec rejects an exec request that cannot run: argv xor command,
// a cwd escaping the workspace, bad env names, limits.
func checkExec(req workspaces.ExecRequest) error {
	switch {
	case len(req.Argv) == 0 && req.Command == "":
		return errors.New("give argv (a list) or command (a shell string)")
	case len(req.Argv) > 0 && req.Command != "":
		return errors.New("give argv or command, not both")
	case len(req.Argv) > 0 && req.Argv[0] == "":
		return errors.New("argv[0] is empty")
	case req.TimeoutSeconds < 0 || req.TimeoutSeconds > workspaces.MaxExecTimeout:
		return fmt.Errorf("timeoutSeconds must be 0 (the default, %ds) to %d", workspaces.DefaultExecTimeout, workspaces.MaxExecTimeout)
	case len(req.Stdin) > workspaces.MaxStdinBytes:
		return fmt.Errorf("stdin is more than %d bytes", workspaces.MaxStdinBytes)
	case strings.ContainsRune(req.Cwd, 0):
		return errors.New("cwd holds a NUL byte")
	}
	if c := path.Clean(req.Cwd); req.Cwd != "" && (path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../")) {
		return fmt.Errorf("cwd %q must be relative to the workspace and stay inside it", req.Cwd)
	}
	for k := range req.Env {
		if !envName.MatchString(k) {
			return fmt.Errorf("env name %q is not a valid variable name", k)
		}
	}
	return nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// File operations on a workspace run as direct operations too: a script
// in the sandbox resolves the path (symlinks included) against the
// workspace (the directory operations start in) and refuses one that
// leaves it. Contents travel base64-encoded through the command's
// streams, in parts when larger than one operation carries (see
// execStdin and execOutput).

// MaxFileBytes bounds a file or tar read or written through the API.
const MaxFileBytes = 64 << 20

// maxFileBase64 is the length of MaxFileBytes in base64.
const maxFileBase64 = (MaxFileBytes + 2) / 3 * 4

// fileScript resolves $1 against the workspace and runs the rest of the
// script with the result in $p; exit 77 when the path leaves the
// workspace, 78 when what the script wants is not there.
const fileScript = `ws=$(pwd -P); p=$(realpath -m -- "$ws/$1") || exit 76
case "$p" in "$ws"|"$ws"/*) ;; *) echo "the path leaves the workspace" >&2; exit 77;; esac
`

// checkRelPath rejects a path that is not relative to the workspace.
func checkRelPath(p string) error {
	c := path.Clean(p)
	switch {
	case p == "":
		return errors.New("the path query parameter is required")
	case strings.ContainsRune(p, 0):
		return errors.New("the path holds a NUL byte")
	case path.IsAbs(p):
		return fmt.Errorf("path %q is absolute: give it relative to the workspace", p)
	case c == ".." || strings.HasPrefix(c, "../"):
		return fmt.Errorf("path %q leaves the workspace", p)
	}
	return nil
}

// fileOp runs script (after fileScript) on the workspace's path rel,
// with data (if any) base64-encoded on its standard input. tooLarge, if
// set, says the script prints up to MaxFileBytes base64-encoded (more is
// a 413 saying tooLarge).
func (s *Server) fileOp(r *http.Request, kind, rel, script string, data []byte, tooLarge string) (res workspaces.ExecResult, err error) {
	st, ws, err := s.requestWorkspace(r)
	if err != nil {
		return workspaces.ExecResult{}, err
	}
	if err := checkRelPath(rel); err != nil {
		return workspaces.ExecResult{}, errdefs.Invalidf("%w", err)
	}
	req := workspaces.ExecRequest{Argv: []string{"sh", "-c", fileScript + script, "sh", rel}, Stdin: base64.StdEncoding.EncodeToString(data)}
	tr := opTrace{kind: kind, request: map[string]any{"path": rel, "bytes": len(data)}}
	if tooLarge != "" {
		res, err = s.execOutput(r.Context(), st, ws, req, tr, maxFileBase64, fmt.Sprintf("%s is larger than %d bytes: %s", rel, MaxFileBytes, tooLarge))
	} else {
		res, err = s.execStdin(r.Context(), st, ws, req, tr)
	}
	if err != nil {
		return res, err
	}
	switch res.ExitCode {
	case 0:
		return res, nil
	case 77:
		return res, errdefs.Invalidf("path %q leaves the workspace (through a symlink)", rel)
	case 78:
		return res, errdefs.NotFoundf("%s: %s", rel, strings.TrimSpace(res.Stderr))
	case 79:
		return res, errdefs.TooLargef("%s is larger than %d bytes: %s", rel, MaxFileBytes, tooLarge)
	}
	return res, errdefs.Upstreamf("%s: exit %d: %s", rel, res.ExitCode, strings.TrimSpace(res.Stderr))
}

// fetch runs a file script that prints bytes base64-encoded and answers
// them as ctype; too many bytes are a 413 saying tooLarge.
func (s *Server) fetch(w http.ResponseWriter, r *http.Request, kind, rel, script, ctype, tooLarge string) error {
	res, err := s.fileOp(r, kind, rel, script, nil, tooLarge)
	if err != nil {
		return err
	}
	if res.StdoutTruncated {
		return errdefs.TooLargef("%s is larger than %d bytes: %s", rel, MaxFileBytes, tooLarge)
	}
	data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(res.Stdout))
	if err != nil {
		return errdefs.Upstreamf("%s came back garbled: %v", rel, err)
	}
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(data)
	return err
}

// put runs a file script with the request's body (at most MaxFileBytes)
// base64-encoded on its standard input; check, if set, vets the body.
func (s *Server) put(w http.ResponseWriter, r *http.Request, kind, rel, script string, check func([]byte) error) error {
	if _, _, err := s.requestWorkspace(r); err != nil {
		return err // before reading the body: a workspace out of scope is not found, whatever is sent
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, MaxFileBytes+1))
	if err != nil {
		return errdefs.Invalidf("read the request body: %v", err)
	}
	if len(data) > MaxFileBytes {
		return errdefs.TooLargef("a file or tar sent through the API is at most %d bytes", MaxFileBytes)
	}
	if check != nil {
		if err := check(data); err != nil {
			return errdefs.Invalidf("%w", err)
		}
	}
	if _, err := s.fileOp(r, kind, rel, script, data, ""); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// readWorkspaceFile answers a file's bytes.
func (s *Server) readWorkspaceFile(w http.ResponseWriter, r *http.Request) error {
	return s.fetch(w, r, "file.read", r.URL.Query().Get("path"), `[ -f "$p" ] || { echo "no such file" >&2; exit 78; }
[ "$(stat -c %s -- "$p")" -le `+fmt.Sprint(MaxFileBytes)+` ] || exit 79
base64 -w0 -- "$p"`, "application/octet-stream", "read it in parts with exec")
}

// writeWorkspaceFile writes the body to a file, making its directories.
func (s *Server) writeWorkspaceFile(w http.ResponseWriter, r *http.Request) error {
	return s.put(w, r, "file.write", r.URL.Query().Get("path"), `[ ! -d "$p" ] || { echo "is a directory" >&2; exit 80; }
mkdir -p -- "$(dirname -- "$p")" && base64 -d > "$p"`, nil)
}

// DirEntry is one entry of a workspace directory listing.
type DirEntry struct {
	Name string `json:"name"`
	Type string `json:"type"` // file, dir, symlink, other
	Size int64  `json:"size"`
	Mode string `json:"mode"`
}

// listWorkspaceDir lists a directory (default: the workspace itself).
func (s *Server) listWorkspaceDir(w http.ResponseWriter, r *http.Request) error {
	rel := orDot(r.URL.Query().Get("path"))
	res, err := s.fileOp(r, "file.list", rel, `[ -d "$p" ] || { echo "no such directory" >&2; exit 78; }
find "$p" -mindepth 1 -maxdepth 1 -printf '%y\t%s\t%m\t%f\0' | head -c `+fmt.Sprint(workspaces.MaxOutputBytes-1024), nil, "")
	if err != nil {
		return err
	}
	entries := []DirEntry{}
	for _, rec := range strings.Split(res.Stdout, "\x00") {
		parts := strings.SplitN(rec, "\t", 4)
		if len(parts) != 4 {
			continue
		}
		e := DirEntry{Name: parts[3], Mode: parts[2]}
		fmt.Sscanf(parts[1], "%d", &e.Size)
		switch parts[0] {
		case "f":
			e.Type = "file"
		case "d":
			e.Type = "dir"
		case "l":
			e.Type = "symlink"
		default:
			e.Type = "other"
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	return writeJSON(w, http.StatusOK, map[string]any{"path": rel, "entries": entries})
}

// downloadWorkspaceTar answers a tar of a directory of the workspace
// (default: all of it).
func (s *Server) downloadWorkspaceTar(w http.ResponseWriter, r *http.Request) error {
	return s.fetch(w, r, "tar.download", orDot(r.URL.Query().Get("path")), `[ -d "$p" ] || { echo "no such directory" >&2; exit 78; }
t=$(mktemp) && tar -C "$p" -cf "$t" . && base64 -w0 "$t"; rc=$?; rm -f "$t"; exit $rc`, "application/x-tar", "download a smaller directory")
}

// uploadWorkspaceTar unpacks a tar (the body) into a directory of the
// workspace. Every member must stay inside it: no absolute or ".." names,
// no links that lead out, no devices.
func (s *Server) uploadWorkspaceTar(w http.ResponseWriter, r *http.Request) error {
	return s.put(w, r, "tar.upload", orDot(r.URL.Query().Get("path")), `mkdir -p -- "$p" && base64 -d | tar -C "$p" -xf - --no-same-owner --no-same-permissions`,
		func(data []byte) error {
			if err := checkTar(data); err != nil {
				return errors.New("the tar: " + err.Error())
			}
			return nil
		})
}

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// checkTar refuses a tar with a member that would land outside the
// directory it is unpacked in.
func checkTar(data []byte) error {
	tr := tar.NewReader(bytes.NewReader(data))
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			if n == 0 {
				return errors.New("it holds no files")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("not a tar archive: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if path.IsAbs(h.Name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("member %q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir:
		case tar.TypeSymlink, tar.TypeLink:
			target := h.Linkname
			if h.Typeflag == tar.TypeSymlink {
				target = path.Join(path.Dir(name), h.Linkname)
			}
			if path.IsAbs(h.Linkname) || target == ".." || strings.HasPrefix(path.Clean(target), "../") {
				return fmt.Errorf("member %q links to %q, outside the directory", h.Name, h.Linkname)
			}
		default:
			return fmt.Errorf("member %q is a %c entry: only files, directories and links inside are taken", h.Name, h.Typeflag)
		}
	}
}
