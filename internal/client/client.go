// Package client is the Go client of Helmr's HTTP API, used by the CLI and
// by remote workers.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs/errhttp"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/vault"
	"github.com/helmr/helmr/internal/waitpoints"
	"github.com/helmr/helmr/internal/workspaces"
)

// Client talks to one control plane.
type Client struct {
	BaseURL string
	Token   string // bearer token (worker token for worker calls)
	HTTP    *http.Client
	// Header is sent with every request: a worker names itself in
	// WorkerHeader, so that a load balancer sends all its requests to one
	// replica.
	Header http.Header
}

// WorkerHeader names the worker a request comes from.
const WorkerHeader = "Helmr-Worker-Id"

// setHeaders adds c.Header to req.
func (c *Client) setHeaders(req *http.Request) {
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
}

// New returns a client for baseURL.
func New(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{}}
}

// APIError is an error response of the API.
type APIError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	Details json.RawMessage
}

func (e *APIError) Error() string { return e.Message }

// Is maps API errors to the errdefs kind of their status, so callers
// branch on them as on the domain's own errors.
func (e *APIError) Is(target error) bool {
	k := errhttp.Kind(e.Status)
	return k != nil && target == k
}

func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) (int, error) {
	var rd io.Reader
	ctype := "application/json"
	if raw, ok := body.([]byte); ok { // bytes as they are
		rd, ctype = bytes.NewReader(raw), "application/octet-stream"
	} else if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(data)
	}
	u := c.BaseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err == nil {
		c.setHeaders(req)
	}
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("cannot reach the Helmr control plane at %s: %w", c.BaseURL, unwrapURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		err := decodeError(resp)
		if resp.StatusCode == http.StatusUnauthorized && c.Token == "" {
			err.Message += " (this client has no credential: set HELMR_API_KEY to an API key or the owner credential; helmr dev writes its own to the profile)"
		}
		return resp.StatusCode, err
	}
	if raw, ok := out.(*[]byte); ok {
		*raw, err = io.ReadAll(resp.Body)
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s %s response: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// stream sends body (nil: none) as application/octet-stream and returns
// the successful response, whose body the caller closes; an error status
// is an *APIError.
func (c *Client) stream(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, body)
	if err == nil {
		c.setHeaders(req)
	}
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the Helmr control plane at %s: %w", c.BaseURL, unwrapURL(err))
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func decodeError(resp *http.Response) *APIError {
	var body struct {
		Error struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Details json.RawMessage `json:"details"`
		} `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(data, &body) != nil || body.Error.Message == "" {
		return &APIError{Status: resp.StatusCode, Code: "http_error", Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))}
	}
	return &APIError{Status: resp.StatusCode, Code: body.Error.Code, Message: body.Error.Message, Details: body.Error.Details}
}

func scope(project, env string) url.Values {
	q := url.Values{}
	q.Set("project", project)
	if env != "" {
		q.Set("env", env)
	}
	return q
}

// Health checks the control plane answers.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/v1/health", nil, nil, nil)
	return err
}

// DeployOptions asks for a deployment whose images are built ahead of
// time (Build), optionally running every step again (NoCache).
type DeployOptions struct{ Build, NoCache bool }

// CreateDeployment uploads a built deployment.
func (c *Client) CreateDeployment(ctx context.Context, env string, m deployments.Manifest, files map[string][]byte, opts DeployOptions) (deployments.Deployment, error) {
	var d deployments.Deployment
	_, err := c.do(ctx, http.MethodPost, "/v1/deployments", nil,
		map[string]any{"env": env, "manifest": m, "files": files, "build": opts.Build, "noCache": opts.NoCache}, &d)
	return d, err
}

// GetDeployment returns a deployment (with its build state).
func (c *Client) GetDeployment(ctx context.Context, id string) (deployments.Deployment, error) {
	var d deployments.Deployment
	_, err := c.do(ctx, http.MethodGet, "/v1/deployments/"+url.PathEscape(id), nil, nil, &d)
	return d, err
}

// TriggerRun starts a run; created is false when the idempotency key
// matched an existing run.
func (c *Client) TriggerRun(ctx context.Context, project, env, task string, payload json.RawMessage, key string) (runs.Run, bool, error) {
	return c.Trigger(ctx, project, env, task, TriggerOptions{Payload: payload, IdempotencyKey: key})
}

// TriggerOptions are a new run's payload, idempotency key, secret
// bindings (name → "vault:NAME") and workspace (empty: a new one).
type TriggerOptions struct {
	Payload        json.RawMessage
	IdempotencyKey string
	Secrets        map[string]string
	WorkspaceID    string
	// Run options (POST /v1/tasks/{id}/runs): durations as Go writes them,
	// Delay also an RFC 3339 time.
	Queue, ConcurrencyKey, Delay, TTL, IdempotencyKeyTTL string
	Priority                                             int
	Tags                                                 []string
	MachineCPU                                           float64
	MachineMemory                                        string
}

// Trigger starts a run; created is false when the idempotency key matched
// an existing run.
func (c *Client) Trigger(ctx context.Context, project, env, task string, o TriggerOptions) (runs.Run, bool, error) {
	var r runs.Run
	body := map[string]any{"payload": o.Payload}
	if o.IdempotencyKey != "" {
		body["idempotencyKey"] = o.IdempotencyKey
	}
	if len(o.Secrets) > 0 {
		body["secrets"] = o.Secrets
	}
	if o.WorkspaceID != "" {
		body["workspaceId"] = o.WorkspaceID
	}
	for k, v := range map[string]string{"queue": o.Queue, "concurrencyKey": o.ConcurrencyKey, "delay": o.Delay, "ttl": o.TTL, "idempotencyKeyTTL": o.IdempotencyKeyTTL} {
		if v != "" {
			body[k] = v
		}
	}
	if o.Priority != 0 {
		body["priority"] = o.Priority
	}
	if len(o.Tags) > 0 {
		body["tags"] = o.Tags
	}
	if o.MachineCPU != 0 || o.MachineMemory != "" {
		m := map[string]any{}
		if o.MachineCPU != 0 {
			m["cpu"] = o.MachineCPU
		}
		if o.MachineMemory != "" {
			m["memory"] = o.MachineMemory
		}
		body["machine"] = m
	}
	st, err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(task)+"/runs", scope(project, env), body, &r)
	return r, st == http.StatusCreated, err
}

// ListWorkspaces lists the live workspaces of project/env.
func (c *Client) ListWorkspaces(ctx context.Context, project, env string) ([]workspaces.Workspace, error) {
	var out struct {
		Workspaces []workspaces.Workspace `json:"workspaces"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/workspaces", scope(project, env), nil, &out)
	return out.Workspaces, err
}

// GetWorkspace fetches a workspace.
func (c *Client) GetWorkspace(ctx context.Context, id string) (workspaces.Workspace, error) {
	var w workspaces.Workspace
	_, err := c.do(ctx, http.MethodGet, "/v1/workspaces/"+url.PathEscape(id), nil, nil, &w)
	return w, err
}

// DeleteWorkspace deletes a workspace.
func (c *Client) DeleteWorkspace(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/workspaces/"+url.PathEscape(id), nil, nil, nil)
	return err
}

// GetRun fetches a run.
func (c *Client) GetRun(ctx context.Context, id string) (runs.Run, error) {
	var r runs.Run
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, nil, &r)
	return r, err
}

// ListRuns lists runs.
func (c *Client) ListRuns(ctx context.Context, project, env string, f runs.Filter) (runs.Page, error) {
	q := scope(project, env)
	limit := f.Limit
	for k, v := range map[string]string{"task": f.TaskID, "status": string(f.Status), "kind": f.Kind, "cursor": f.Cursor, "tag": f.Tag, "queue": f.Queue, "parent": f.ParentID} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	var p runs.Page
	_, err := c.do(ctx, http.MethodGet, "/v1/runs", q, nil, &p)
	return p, err
}

// CancelRun cancels a run.
func (c *Client) CancelRun(ctx context.Context, id string) (runs.Run, error) {
	var r runs.Run
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/cancel", nil, nil, &r)
	return r, err
}

// EventPage is a page of run events.
type EventPage struct {
	Events     []runs.Event `json:"events"`
	NextCursor int64        `json:"nextCursor"`
	Done       bool         `json:"done"`
}

// Events reads a page of events after the cursor.
func (c *Client) Events(ctx context.Context, id string, after int64) (EventPage, error) {
	var p EventPage
	q := url.Values{"after": {fmt.Sprint(after)}}
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/events", q, nil, &p)
	return p, err
}

// ListTasks lists the current tasks of a project environment.
func (c *Client) ListTasks(ctx context.Context, project, env string) ([]deployments.Task, error) {
	var out struct {
		Tasks []deployments.Task `json:"tasks"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/tasks", scope(project, env), nil, &out)
	return out.Tasks, err
}

// WaitHealthy polls the health endpoint until it answers or ctx ends.
func (c *Client) WaitHealthy(ctx context.Context) error {
	for {
		if err := c.Health(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SetSecret seals value as secret name of the project environment; the
// answer is metadata only.
func (c *Client) SetSecret(ctx context.Context, project, env, name string, value []byte) (vault.Meta, error) {
	var m vault.Meta
	_, err := c.do(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name), scope(project, env), map[string]string{"value": string(value)}, &m)
	return m, err
}

// SetSecretWithEgress seals value as secret name with the egress rule e
// (nil: its value is placed in the sandboxes that bind it).
func (c *Client) SetSecretWithEgress(ctx context.Context, project, env, name string, value []byte, e *vault.Egress) (vault.Meta, error) {
	var m vault.Meta
	_, err := c.do(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name), scope(project, env), map[string]any{"value": string(value), "egress": e}, &m)
	return m, err
}

// ListSecrets returns the metadata of a project environment's secrets.
func (c *Client) ListSecrets(ctx context.Context, project, env string) ([]vault.Meta, error) {
	var out struct {
		Secrets []vault.Meta `json:"secrets"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/secrets", scope(project, env), nil, &out)
	return out.Secrets, err
}

// DeleteSecret removes a secret.
func (c *Client) DeleteSecret(ctx context.Context, project, env, name string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(name), scope(project, env), nil, nil)
	return err
}

// RunView is a run as GET /v1/runs/{id} shows it: with what a WAITING run
// waits on.
type RunView struct {
	runs.Run
	Metadata  map[string]json.RawMessage `json:"metadata"`
	WaitingOn []waitpoints.Waitpoint     `json:"waitingOn,omitempty"`
	// Children are the runs it triggered (the latest
	// runs.MaxChildrenShown, oldest first; GET /v1/runs?parent=ID lists
	// all of them).
	Children []runs.ChildSummary `json:"children,omitempty"`
}

// GetRunView returns a run with the waitpoints it waits on.
func (c *Client) GetRunView(ctx context.Context, id string) (RunView, error) {
	var r RunView
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, nil, &r)
	return r, err
}

// ListTokens lists waitpoints of a project env.
func (c *Client) ListTokens(ctx context.Context, project, env string, f waitpoints.Filter) (waitpoints.Page, error) {
	q := scope(project, env)
	for k, v := range map[string]string{"status": string(f.Status), "run": f.RunID, "tag": f.Tag, "cursor": f.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var p waitpoints.Page
	_, err := c.do(ctx, http.MethodGet, "/v1/tokens", q, nil, &p)
	return p, err
}

// GetToken returns a waitpoint.
func (c *Client) GetToken(ctx context.Context, id string) (waitpoints.Waitpoint, error) {
	var w waitpoints.Waitpoint
	_, err := c.do(ctx, http.MethodGet, "/v1/tokens/"+url.PathEscape(id), nil, nil, &w)
	return w, err
}

// CompleteToken completes a waitpoint with data (JSON).
func (c *Client) CompleteToken(ctx context.Context, id string, data json.RawMessage) (waitpoints.Waitpoint, error) {
	var w waitpoints.Waitpoint
	_, err := c.do(ctx, http.MethodPost, "/v1/tokens/"+url.PathEscape(id)+"/complete", nil, map[string]any{"data": data}, &w)
	return w, err
}

// CancelToken cancels a waitpoint.
func (c *Client) CancelToken(ctx context.Context, id, reason string) (waitpoints.Waitpoint, error) {
	var w waitpoints.Waitpoint
	_, err := c.do(ctx, http.MethodPost, "/v1/tokens/"+url.PathEscape(id)+"/cancel", nil, map[string]any{"reason": reason}, &w)
	return w, err
}

// Approve completes the human wait of a run with data (JSON; nil: none).
func (c *Client) Approve(ctx context.Context, runID string, data json.RawMessage) (waitpoints.Waitpoint, error) {
	body := map[string]any{}
	if data != nil {
		body["data"] = data
	}
	var w waitpoints.Waitpoint
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/approve", nil, body, &w)
	return w, err
}

// Reject cancels the human wait of a run with a reason.
func (c *Client) Reject(ctx context.Context, runID, reason string) (waitpoints.Waitpoint, error) {
	var w waitpoints.Waitpoint
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/reject", nil, map[string]any{"reason": reason}, &w)
	return w, err
}

// Exec runs a command in a workspace (a direct operation).
func (c *Client) Exec(ctx context.Context, workspaceID string, req workspaces.ExecRequest) (workspaces.ExecResult, error) {
	var res workspaces.ExecResult
	_, err := c.do(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(workspaceID)+"/exec", nil, req, &res)
	return res, err
}

// ReadFile reads a file of a workspace (path relative to it).
func (c *Client) ReadFile(ctx context.Context, workspaceID, path string) ([]byte, error) {
	var buf bytes.Buffer
	_, err := c.ReadFileTo(ctx, workspaceID, path, &buf)
	return buf.Bytes(), err
}

// ReadFileTo streams a file of a workspace to w and returns its size. A
// response cut short is an error.
func (c *Client) ReadFileTo(ctx context.Context, workspaceID, path string, w io.Writer) (int64, error) {
	return c.download(ctx, workspaceFilePath(workspaceID, "files", path), w)
}

// ListDir lists a directory of a workspace ("": the workspace itself).
func (c *Client) ListDir(ctx context.Context, workspaceID, path string) (workspaces.Dir, error) {
	var d workspaces.Dir
	_, err := c.do(ctx, http.MethodGet, "/v1/workspaces/"+url.PathEscape(workspaceID)+"/dir", url.Values{"path": {path}}, nil, &d)
	return d, err
}

// WriteFile writes a file of a workspace.
func (c *Client) WriteFile(ctx context.Context, workspaceID, path string, data []byte) error {
	return c.WriteFileFrom(ctx, workspaceID, path, bytes.NewReader(data))
}

// WriteFileFrom streams r (to its end) to a file of a workspace.
func (c *Client) WriteFileFrom(ctx context.Context, workspaceID, path string, r io.Reader) error {
	return c.upload(ctx, workspaceFilePath(workspaceID, "files", path), r)
}

func workspaceFilePath(workspaceID, what, path string) string {
	return "/v1/workspaces/" + url.PathEscape(workspaceID) + "/" + what + "?" + url.Values{"path": {path}}.Encode()
}

// download streams a GET's body to w.
func (c *Client) download(ctx context.Context, path string, w io.Writer) (int64, error) {
	resp, err := c.stream(ctx, http.MethodGet, path, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("GET %s: the response broke off after %d bytes: %w", path, n, err)
	}
	return n, nil
}

// upload streams r as a PUT's body.
func (c *Client) upload(ctx context.Context, path string, r io.Reader) error {
	resp, err := c.stream(ctx, http.MethodPut, path, r)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// CreateWorkspace makes an empty workspace for a deployed task's sandbox.
func (c *Client) CreateWorkspace(ctx context.Context, project, env string, req workspaces.CreateRequest) (workspaces.Workspace, error) {
	var w workspaces.Workspace
	_, err := c.do(ctx, http.MethodPost, "/v1/workspaces", scope(project, env), req, &w)
	return w, err
}

// DownloadTar returns a tar of a directory of a workspace.
func (c *Client) DownloadTar(ctx context.Context, workspaceID, path string) ([]byte, error) {
	var buf bytes.Buffer
	_, err := c.DownloadTarTo(ctx, workspaceID, path, &buf)
	return buf.Bytes(), err
}

// DownloadTarTo streams a tar of a directory of a workspace to w.
func (c *Client) DownloadTarTo(ctx context.Context, workspaceID, path string, w io.Writer) (int64, error) {
	return c.download(ctx, workspaceFilePath(workspaceID, "tar", path), w)
}

// UploadTar unpacks a tar into a directory of a workspace.
func (c *Client) UploadTar(ctx context.Context, workspaceID, path string, tarData []byte) error {
	return c.UploadTarFrom(ctx, workspaceID, path, bytes.NewReader(tarData))
}

// UploadTarFrom streams a tar (r, to its end) into a directory of a
// workspace.
func (c *Client) UploadTarFrom(ctx context.Context, workspaceID, path string, r io.Reader) error {
	return c.upload(ctx, workspaceFilePath(workspaceID, "tar", path), r)
}

// ExecStream runs a command in a workspace and calls output with each
// piece of its output (whole lines, redacted) as it comes, then returns
// its result.
func (c *Client) ExecStream(ctx context.Context, workspaceID string, req workspaces.ExecRequest, output func(workspaces.OpOutput)) (workspaces.ExecResult, error) {
	body, _ := json.Marshal(req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/v1/workspaces/"+url.PathEscape(workspaceID)+"/exec/stream", bytes.NewReader(body))
	if err != nil {
		return workspaces.ExecResult{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	if c.Token != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(hreq)
	if err != nil {
		return workspaces.ExecResult{}, fmt.Errorf("cannot reach the Helmr control plane at %s: %w", c.BaseURL, unwrapURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return workspaces.ExecResult{}, decodeError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := []byte(strings.TrimPrefix(line, "data: "))
			switch event {
			case "output":
				var out workspaces.OpOutput
				if err := json.Unmarshal(data, &out); err == nil && output != nil {
					output(out)
				}
			case "result":
				var res workspaces.ExecResult
				err := json.Unmarshal(data, &res)
				return res, err
			case "error":
				var e struct {
					Status  int    `json:"status"`
					Code    string `json:"code"`
					Message string `json:"message"`
				}
				_ = json.Unmarshal(data, &e)
				return workspaces.ExecResult{}, &APIError{Status: e.Status, Code: e.Code, Message: e.Message}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return workspaces.ExecResult{}, err
	}
	return workspaces.ExecResult{}, errors.New("the exec stream ended without a result")
}

// Queues lists a project environment's run queues.
func (c *Client) Queues(ctx context.Context, project, env string) ([]runs.Queue, error) {
	var out struct {
		Queues []runs.Queue `json:"queues"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/queues", scope(project, env), nil, &out)
	return out.Queues, err
}

// PauseQueue pauses (paused) or resumes a queue.
func (c *Client) PauseQueue(ctx context.Context, project, env, name string, paused bool) (runs.Queue, error) {
	verb := "resume"
	if paused {
		verb = "pause"
	}
	var q runs.Queue
	_, err := c.do(ctx, http.MethodPost, "/v1/queues/"+url.PathEscape(name)+"/"+verb, scope(project, env), nil, &q)
	return q, err
}
