package httpapi

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/vault"
	"github.com/helmr/helmr/internal/waitpoints"
	"github.com/helmr/helmr/internal/worker"
	"github.com/helmr/helmr/internal/workers"
	"github.com/helmr/helmr/internal/workspaces"
)

// LeaseRequest is the body of POST /v1/worker/lease.
type LeaseRequest struct {
	WorkerID     string               `json:"workerId"`
	Capabilities workers.Capabilities `json:"capabilities"`
}

func (s *Server) workerLease(w http.ResponseWriter, r *http.Request) error {
	var req LeaseRequest
	if err := decodeJSON(w, r, 1<<20, &req); err != nil {
		return err
	}
	if req.WorkerID == "" {
		return errdefs.Invalidf("workerId is required")
	}
	if err := actAs(r.Context(), req.WorkerID); err != nil {
		return err
	}
	lease, err := s.control.Lease(r.Context(), req.WorkerID, req.Capabilities)
	if err == nil && r.Context().Err() != nil {
		// Leased as the worker went away: the run goes back to the
		// queue rather than waiting for the worker to be given up.
		if err := s.control.ReturnLease(context.WithoutCancel(r.Context()), lease); err != nil {
			s.log.Warn("return a lease its worker did not take", "run_id", lease.Run.ID, "err", err)
		}
	}
	switch {
	case errors.Is(err, worker.ErrNoWork), r.Context().Err() != nil:
		w.WriteHeader(http.StatusNoContent)
		return nil
	case err != nil:
		return err
	}
	return writeJSON(w, http.StatusOK, lease)
}

func (s *Server) workerFiles(w http.ResponseWriter, r *http.Request) error {
	files, err := s.cfg.Deployments.GetDeploymentFiles(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"files": files})
}

// StartedRequest is the body of POST /v1/worker/runs/{id}/started.
type StartedRequest struct {
	WorkerID string          `json:"workerId"`
	Tier     string          `json:"tier"`
	Note     runs.SystemData `json:"note"`
}

func (s *Server) workerStarted(w http.ResponseWriter, r *http.Request) error {
	var req StartedRequest
	if err := decodeJSON(w, r, 1<<20, &req); err != nil {
		return err
	}
	if err := actAs(r.Context(), req.WorkerID); err != nil {
		return err
	}
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	run, err := s.cfg.Runs.Started(r.Context(), r.PathValue("id"), req.WorkerID, req.Tier, req.Note)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, run)
}

// LogsRequest is the body of POST /v1/worker/runs/{id}/logs.
type LogsRequest struct {
	Lines []runs.LogData `json:"lines"`
	Time  time.Time      `json:"time"`
}

func (s *Server) workerLogs(w http.ResponseWriter, r *http.Request) error {
	var req LogsRequest
	if err := decodeJSON(w, r, 16<<20, &req); err != nil {
		return err
	}
	if req.Time.IsZero() {
		req.Time = time.Now().UTC()
	}
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	if err := s.cfg.Runs.AppendLogs(r.Context(), r.PathValue("id"), req.Lines, req.Time); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) workerFinish(w http.ResponseWriter, r *http.Request) error {
	var req runs.Outcome
	if err := decodeJSON(w, r, runs.MaxPayloadBytes+1<<20, &req); err != nil {
		return err
	}
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	run, err := s.cfg.Runs.Finish(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, run)
}

func (s *Server) workerStatus(w http.ResponseWriter, r *http.Request) error {
	run, err := s.heldRun(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"status": run.Status})
}

// workerSecrets hands the worker running a run the values of its bound
// secrets (base64), and only while it runs.
func (s *Server) workerSecrets(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	vals, err := s.cfg.Runs.RunSecrets(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	out, egress := map[string]string{}, map[string]*vault.Egress{}
	for k, v := range vals {
		out[k] = base64.StdEncoding.EncodeToString(v.Value)
		if v.Egress != nil {
			egress[k] = v.Egress
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"secrets": out, "egress": egress})
}

// workerDeletedWorkspaces tells a worker which of the workspaces it holds
// files of were deleted (or are unknown), so it removes them, and, given
// its host, which moved to another host.
func (s *Server) workerDeletedWorkspaces(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		IDs  []string `json:"ids"`
		Host string   `json:"host"`
	}
	if err := decodeJSON(w, r, 4<<20, &req); err != nil {
		return err
	}
	if len(req.IDs) > 100000 {
		return errdefs.Invalidf("at most 100000 workspace ids at once")
	}
	svc, err := s.workspaceService()
	if err != nil {
		return err
	}
	st := svc.Store()
	gone, err := st.DeletedWorkspaces(r.Context(), req.IDs)
	if err != nil {
		return err
	}
	moved := []string{}
	if req.Host != "" {
		if moved, err = st.MovedWorkspaces(r.Context(), req.Host, req.IDs); err != nil {
			return err
		}
	}
	if gone == nil {
		gone = []string{}
	}
	if moved == nil {
		moved = []string{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"deleted": gone, "moved": moved})
}

// workerBuildSecret hands the worker building a run's image one build
// secret the image names.
func (s *Server) workerBuildSecret(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	v, err := s.cfg.Runs.RunBuildSecret(r.Context(), r.PathValue("id"), r.PathValue("name"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"value": base64.StdEncoding.EncodeToString(v.Value), "egress": v.Egress})
}

func (s *Server) workerHeartbeat(w http.ResponseWriter, r *http.Request) error {
	var req LeaseRequest
	if err := decodeJSON(w, r, 1<<20, &req); err != nil {
		return err
	}
	if err := actAs(r.Context(), req.WorkerID); err != nil {
		return err
	}
	if err := s.cfg.Runs.Heartbeat(r.Context(), req.WorkerID, req.Capabilities); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) workerCreateWaitpoint(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.waits(); err != nil {
		return err
	}
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	var req waitpoints.CreateRequest
	if err := decodeJSON(w, r, waitpoints.MaxSchemaBytes+64<<10, &req); err != nil {
		return err
	}
	wp, err := s.control.CreateWaitpoint(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, wp)
}

func (s *Server) workerTriggerChildren(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	var req runs.ChildrenRequest
	if err := decodeJSON(w, r, runs.MaxPayloadBytes+64<<10, &req); err != nil {
		return err
	}
	res, err := s.control.TriggerChildren(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, res)
}

func (s *Server) workerBeginWait(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.waits(); err != nil {
		return err
	}
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	wp, err := s.control.BeginWait(r.Context(), r.PathValue("id"), r.PathValue("wp"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wp)
}

// workerAwaitWaitpoint long-polls: it answers once the waitpoint resolved,
// or with it still WAITING after the control plane's await bound.
func (s *Server) workerAwaitWaitpoint(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.waits(); err != nil {
		return err
	}
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	wp, err := s.control.AwaitWaitpoint(r.Context(), r.PathValue("id"), r.PathValue("wp"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wp)
}

func (s *Server) workerEndWait(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.waits(); err != nil {
		return err
	}
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	if err := s.control.EndWait(r.Context(), r.PathValue("id"), r.PathValue("wp")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// workerNextOp long-polls for a direct operation on a workspace of the
// worker's host: 200 with it, or 204.
func (s *Server) workerNextOp(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		WorkerID string `json:"workerId"`
		Host     string `json:"host"`
	}
	if err := decodeJSON(w, r, 64<<10, &req); err != nil {
		return err
	}
	if req.WorkerID == "" || req.Host == "" {
		return errdefs.Invalidf("workerId and host are required")
	}
	if err := actAs(r.Context(), req.WorkerID); err != nil {
		return err
	}
	op, err := s.control.NextOp(r.Context(), req.WorkerID, req.Host)
	if err == nil && r.Context().Err() != nil {
		// Handed over as the worker went away: answer its caller now
		// rather than at its timeout.
		_ = s.control.FinishOp(context.WithoutCancel(r.Context()), op.ID, workspaces.OpResult{Error: "the worker that took the operation went away; try again"})
		err = workspaces.ErrNoOp
	}
	if errors.Is(err, workspaces.ErrNoOp) || r.Context().Err() != nil {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, op)
}

// workerOpOutput takes a piece of a streamed operation's output.
func (s *Server) workerOpOutput(w http.ResponseWriter, r *http.Request) error {
	var out workspaces.OpOutput
	if err := decodeJSON(w, r, 2*workspaces.MaxOutputBytes, &out); err != nil {
		return err
	}
	if out.Stream != "stdout" && out.Stream != "stderr" {
		return errdefs.Invalidf("stream must be stdout or stderr")
	}
	if err := s.control.OpOutput(r.Context(), r.PathValue("id"), out); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// workerFinishOp takes a worker's result of a direct operation.
func (s *Server) workerFinishOp(w http.ResponseWriter, r *http.Request) error {
	var res workspaces.OpResult
	if err := decodeJSON(w, r, 4*workspaces.MaxOutputBytes+64<<10, &res); err != nil {
		return err
	}
	if err := s.control.FinishOp(r.Context(), r.PathValue("id"), res); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// workerOpInput streams a data operation's input (the bytes for its
// command's stdin) to the worker running it. A stream that fails part
// way is aborted, so that the worker reads an error, never a short EOF.
func (s *Server) workerOpInput(w http.ResponseWriter, r *http.Request) error {
	rc, err := s.control.OpInput(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	// The headers go at once and each piece as it is read: a terminal's
	// worker waits for the stream before its first key comes, and keys
	// come a few at a time.
	fw := flushWriter{w, http.NewResponseController(w)}
	_ = fw.rc.Flush()
	if _, err := io.Copy(fw, rc); err != nil {
		s.log.Warn("stream a workspace operation's input", "op_id", r.PathValue("id"), "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// flushWriter flushes the response after each write.
type flushWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (f flushWriter) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	if err == nil {
		err = f.rc.Flush()
	}
	return n, err
}

// workerOpDeliver takes a data operation's output (its command's
// stdout), streamed as the request body, to the request that waits for
// it.
func (s *Server) workerOpDeliver(w http.ResponseWriter, r *http.Request) error {
	if err := s.control.OpDeliver(r.Context(), r.PathValue("id"), r.Body); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
