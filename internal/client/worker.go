package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/vault"
	"github.com/helmr/helmr/internal/waitpoints"
	"github.com/helmr/helmr/internal/worker"
	"github.com/helmr/helmr/internal/workers"
	"github.com/helmr/helmr/internal/workspaces"
)

// Worker is the remote worker's view of the control plane: a
// worker.ControlPlane over HTTP, authenticated with the worker token.
type Worker struct{ C *Client }

var _ worker.ControlPlane = Worker{}

// Lease implements worker.ControlPlane (long poll).
func (w Worker) Lease(ctx context.Context, workerID string, caps workers.Capabilities) (worker.Lease, error) {
	var l worker.Lease
	st, err := w.C.do(ctx, http.MethodPost, "/v1/worker/lease", nil, map[string]any{"workerId": workerID, "capabilities": caps}, &l)
	if err == nil && st == http.StatusNoContent {
		return l, worker.ErrNoWork
	}
	return l, err
}

// Files implements worker.ControlPlane.
func (w Worker) Files(ctx context.Context, id string) (map[string][]byte, error) {
	var out struct {
		Files map[string][]byte `json:"files"`
	}
	_, err := w.C.do(ctx, http.MethodGet, "/v1/worker/deployments/"+url.PathEscape(id)+"/files", nil, nil, &out)
	return out.Files, err
}

// Started implements worker.ControlPlane.
func (w Worker) Started(ctx context.Context, runID, workerID, tier string, note runs.SystemData) error {
	_, err := w.C.do(ctx, http.MethodPost, "/v1/worker/runs/"+url.PathEscape(runID)+"/started", nil,
		map[string]any{"workerId": workerID, "tier": tier, "note": note}, nil)
	return err
}

// Logs implements worker.ControlPlane.
func (w Worker) Logs(ctx context.Context, runID string, lines []runs.LogData, at time.Time) error {
	_, err := w.C.do(ctx, http.MethodPost, "/v1/worker/runs/"+url.PathEscape(runID)+"/logs", nil,
		map[string]any{"lines": lines, "time": at}, nil)
	return err
}

// Finish implements worker.ControlPlane.
func (w Worker) Finish(ctx context.Context, runID string, o runs.Outcome) error {
	_, err := w.C.do(ctx, http.MethodPost, "/v1/worker/runs/"+url.PathEscape(runID)+"/finish", nil, o, nil)
	return err
}

// Heartbeat implements worker.ControlPlane.
func (w Worker) Heartbeat(ctx context.Context, workerID string, caps workers.Capabilities) error {
	_, err := w.C.do(ctx, http.MethodPost, "/v1/worker/heartbeat", nil, map[string]any{"workerId": workerID, "capabilities": caps}, nil)
	return err
}

// Status implements worker.ControlPlane.
func (w Worker) Status(ctx context.Context, runID string) (runs.Status, error) {
	var out struct {
		Status runs.Status `json:"status"`
	}
	_, err := w.C.do(ctx, http.MethodGet, "/v1/worker/runs/"+url.PathEscape(runID)+"/status", nil, nil, &out)
	return out.Status, err
}

// RunSecrets implements worker.ControlPlane.
func (w Worker) RunSecrets(ctx context.Context, runID string) (map[string]runs.BoundSecret, error) {
	var out struct {
		Secrets map[string]string        `json:"secrets"`
		Egress  map[string]*vault.Egress `json:"egress"`
	}
	if _, err := w.C.do(ctx, http.MethodGet, "/v1/worker/runs/"+url.PathEscape(runID)+"/secrets", nil, nil, &out); err != nil {
		return nil, err
	}
	vals := map[string]runs.BoundSecret{}
	for k, v := range out.Secrets {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", k, err)
		}
		vals[k] = runs.BoundSecret{Value: b, Egress: out.Egress[k]}
	}
	return vals, nil
}

// StaleWorkspaces implements worker.ControlPlane.
func (w Worker) StaleWorkspaces(ctx context.Context, host string, ids []string) (deleted, moved []string, err error) {
	var out struct {
		Deleted []string `json:"deleted"`
		Moved   []string `json:"moved"`
	}
	_, err = w.C.do(ctx, http.MethodPost, "/v1/worker/workspaces/deleted", nil, map[string]any{"ids": ids, "host": host}, &out)
	return out.Deleted, out.Moved, err
}

// BuildSecret implements worker.ControlPlane.
func (w Worker) BuildSecret(ctx context.Context, runID, name string) (runs.BoundSecret, error) {
	var out struct {
		Value  string        `json:"value"`
		Egress *vault.Egress `json:"egress"`
	}
	if _, err := w.C.do(ctx, http.MethodGet, "/v1/worker/runs/"+url.PathEscape(runID)+"/build-secrets/"+url.PathEscape(name), nil, nil, &out); err != nil {
		return runs.BoundSecret{}, err
	}
	b, err := base64.StdEncoding.DecodeString(out.Value)
	return runs.BoundSecret{Value: b, Egress: out.Egress}, err
}

func waitPath(runID, waitpointID string) string {
	return "/v1/worker/runs/" + url.PathEscape(runID) + "/waits/" + url.PathEscape(waitpointID)
}

// CreateWaitpoint implements worker.ControlPlane.
func (w Worker) CreateWaitpoint(ctx context.Context, runID string, req waitpoints.CreateRequest) (waitpoints.Waitpoint, error) {
	var out waitpoints.Waitpoint
	_, err := w.C.do(ctx, http.MethodPost, "/v1/worker/runs/"+url.PathEscape(runID)+"/waitpoints", nil, req, &out)
	return out, err
}

// TriggerChildren implements worker.ControlPlane.
func (w Worker) TriggerChildren(ctx context.Context, runID string, req runs.ChildrenRequest) (runs.ChildrenResult, error) {
	var out runs.ChildrenResult
	_, err := w.C.do(ctx, http.MethodPost, "/v1/worker/runs/"+url.PathEscape(runID)+"/children", nil, req, &out)
	return out, err
}

// BeginWait implements worker.ControlPlane.
func (w Worker) BeginWait(ctx context.Context, runID, waitpointID string) (waitpoints.Waitpoint, error) {
	var out waitpoints.Waitpoint
	_, err := w.C.do(ctx, http.MethodPost, waitPath(runID, waitpointID), nil, nil, &out)
	return out, err
}

// AwaitWaitpoint implements worker.ControlPlane (long poll).
func (w Worker) AwaitWaitpoint(ctx context.Context, runID, waitpointID string) (waitpoints.Waitpoint, error) {
	var out waitpoints.Waitpoint
	_, err := w.C.do(ctx, http.MethodGet, waitPath(runID, waitpointID), nil, nil, &out)
	return out, err
}

// EndWait implements worker.ControlPlane.
func (w Worker) EndWait(ctx context.Context, runID, waitpointID string) error {
	_, err := w.C.do(ctx, http.MethodPost, waitPath(runID, waitpointID)+"/end", nil, nil, nil)
	return err
}

// NextOp implements worker.ControlPlane (long poll).
func (w Worker) NextOp(ctx context.Context, workerID, host string) (workspaces.Op, error) {
	var op workspaces.Op
	st, err := w.C.do(ctx, http.MethodPost, "/v1/worker/ops/next", nil, map[string]any{"workerId": workerID, "host": host}, &op)
	if err == nil && st == http.StatusNoContent {
		return op, workspaces.ErrNoOp
	}
	return op, err
}

// OpOutput implements worker.ControlPlane.
func (w Worker) OpOutput(ctx context.Context, id string, out workspaces.OpOutput) error {
	_, err := w.C.do(ctx, http.MethodPost, "/v1/worker/ops/"+url.PathEscape(id)+"/output", nil, out, nil)
	return err
}

// FinishOp implements worker.ControlPlane.
func (w Worker) FinishOp(ctx context.Context, id string, res workspaces.OpResult) error {
	_, err := w.C.do(ctx, http.MethodPost, "/v1/worker/ops/"+url.PathEscape(id)+"/result", nil, res, nil)
	return err
}

func sessionPath(runID, rest string) string {
	return "/v1/worker/runs/" + url.PathEscape(runID) + rest
}

// SessionInput implements worker.ControlPlane (long poll).
func (w Worker) SessionInput(ctx context.Context, runID string, after int64) ([]runs.Record, error) {
	var out struct {
		Records []runs.Record `json:"records"`
	}
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	_, err := w.C.do(ctx, http.MethodGet, sessionPath(runID, "/session/input"), q, nil, &out)
	return out.Records, err
}

// AppendOutput implements worker.ControlPlane.
func (w Worker) AppendOutput(ctx context.Context, runID, id string, data json.RawMessage) (runs.Record, error) {
	var out runs.Record
	body := map[string]any{"data": data, "idempotencyKey": id}
	_, err := w.C.do(ctx, http.MethodPost, sessionPath(runID, "/session/output"), nil, body, &out)
	return out, err
}

// SetMetadata implements worker.ControlPlane.
func (w Worker) SetMetadata(ctx context.Context, runID, key string, value json.RawMessage) error {
	body := map[string]any{"key": key, "value": value}
	_, err := w.C.do(ctx, http.MethodPost, sessionPath(runID, "/metadata"), nil, body, nil)
	return err
}

// PutCheckpoint implements worker.ControlPlane: the sealed bytes are
// streamed as the request body.
func (w Worker) PutCheckpoint(ctx context.Context, runID, checkpointID string, r io.Reader) (int64, error) {
	var out struct {
		Size int64 `json:"size"`
	}
	resp, err := w.C.stream(ctx, http.MethodPut, checkpointPath(runID, checkpointID), r)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("decode checkpoint upload response: %w", err)
	}
	return out.Size, nil
}

// GetCheckpoint implements worker.ControlPlane.
func (w Worker) GetCheckpoint(ctx context.Context, runID, checkpointID string) (io.ReadCloser, error) {
	resp, err := w.C.stream(ctx, http.MethodGet, checkpointPath(runID, checkpointID), nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func checkpointPath(runID, checkpointID string) string {
	return "/v1/worker/runs/" + url.PathEscape(runID) + "/checkpoints/" + url.PathEscape(checkpointID)
}

// Park implements worker.ControlPlane.
func (w Worker) Park(ctx context.Context, runID string, req worker.ParkRequest) error {
	_, err := w.C.do(ctx, http.MethodPost, "/v1/worker/runs/"+url.PathEscape(runID)+"/park", nil, req, nil)
	return err
}

// RestoredCheckpoint implements worker.ControlPlane.
func (w Worker) RestoredCheckpoint(ctx context.Context, runID, checkpointID string) error {
	_, err := w.C.do(ctx, http.MethodPost, checkpointPath(runID, checkpointID)+"/restored", nil, nil, nil)
	return err
}

// PutWorkspaceSnapshot implements worker.ControlPlane: the sealed bytes
// are streamed as the request body.
func (w Worker) PutWorkspaceSnapshot(ctx context.Context, workerID, wsID string, seq int64, r io.Reader) (workspaces.Snapshot, error) {
	var out workspaces.Snapshot
	resp, err := w.C.stream(ctx, http.MethodPut, snapshotPath(workerID, wsID, seq), r)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("decode workspace snapshot upload response: %w", err)
	}
	return out, nil
}

// GetWorkspaceSnapshot implements worker.ControlPlane.
func (w Worker) GetWorkspaceSnapshot(ctx context.Context, workerID, wsID string, seq int64) (io.ReadCloser, error) {
	resp, err := w.C.stream(ctx, http.MethodGet, snapshotPath(workerID, wsID, seq), nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// PutWorkspaceCheckpoint implements worker.ControlPlane: the sealed
// bytes are streamed as the request body.
func (w Worker) PutWorkspaceCheckpoint(ctx context.Context, workerID, wsID, checkpointID string, r io.Reader) (int64, error) {
	var out struct {
		Size int64 `json:"size"`
	}
	resp, err := w.C.stream(ctx, http.MethodPut, wsCheckpointPath(workerID, wsID, checkpointID), r)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("decode workspace checkpoint upload response: %w", err)
	}
	return out.Size, nil
}

// GetWorkspaceCheckpoint implements worker.ControlPlane.
func (w Worker) GetWorkspaceCheckpoint(ctx context.Context, workerID, wsID, checkpointID string) (io.ReadCloser, error) {
	resp, err := w.C.stream(ctx, http.MethodGet, wsCheckpointPath(workerID, wsID, checkpointID), nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func wsCheckpointPath(workerID, wsID, checkpointID string) string {
	return "/v1/worker/workspaces/" + url.PathEscape(wsID) + "/checkpoints/" + url.PathEscape(checkpointID) +
		"?" + url.Values{"workerId": {workerID}}.Encode()
}

func snapshotPath(workerID, wsID string, seq int64) string {
	return "/v1/worker/workspaces/" + url.PathEscape(wsID) + "/snapshots/" + strconv.FormatInt(seq, 10) +
		"?" + url.Values{"workerId": {workerID}}.Encode()
}

var _ worker.OpStreams = Worker{}

// OpInput implements worker.OpStreams: the bytes stream as the response
// body, which the caller closes. A body that ends early (the control
// plane aborted it) reads as an error, not EOF.
func (w Worker) OpInput(ctx context.Context, id string) (io.ReadCloser, error) {
	resp, err := w.unbounded().stream(ctx, http.MethodGet, opDataPath(id), nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// OpDeliver implements worker.OpStreams: r streams as the request body.
func (w Worker) OpDeliver(ctx context.Context, id string, r io.Reader) error {
	resp, err := w.unbounded().stream(ctx, http.MethodPut, opDataPath(id), r)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// unbounded is the client without an overall request timeout: a stream
// lasts as long as its bytes take (its context bounds it).
func (w Worker) unbounded() *Client {
	c := *w.C
	if c.HTTP != nil {
		h := *c.HTTP
		h.Timeout = 0
		c.HTTP = &h
	}
	return &c
}

func opDataPath(id string) string { return "/v1/worker/ops/" + url.PathEscape(id) + "/data" }
