package httpapi

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/worker"
)

// checkpointBlobs returns the blob store, or 503 without one.
func (s *Server) checkpointBlobs() (checkpoints.Blobs, error) {
	if s.cfg.Blobs == nil || s.cfg.Checkpoints == nil {
		return nil, errdefs.Unavailablef("this control plane keeps no checkpoints (no blob store)")
	}
	return s.cfg.Blobs, nil
}

// workerPutCheckpoint stores a parking worker's sealed checkpoint, streamed
// as the request body, under the checkpoint id; the worker records it
// (park) afterwards. The id must not belong to another run's checkpoint.
func (s *Server) workerPutCheckpoint(w http.ResponseWriter, r *http.Request) error {
	blobs, err := s.checkpointBlobs()
	if err != nil {
		return err
	}
	run, err := s.heldRun(r)
	if err != nil {
		return err
	}
	id := r.PathValue("ck")
	if !strings.HasPrefix(id, checkpoints.Prefix) {
		// Not another kind of blob: a workspace's snapshot is no run's.
		return errdefs.Invalidf("checkpoint id %s is malformed (want %s and up to 60 of [0-9a-z])", id, checkpoints.Prefix)
	}
	if c, err := s.cfg.Checkpoints.GetCheckpoint(r.Context(), id); err == nil {
		if c.RunID != run.ID {
			return errdefs.Conflictf("checkpoint %s belongs to another run", id)
		}
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	n, err := blobs.Put(r.Context(), id, r.Body)
	if errors.Is(err, errdefs.ErrInvalid) {
		return errdefs.Invalidf("checkpoint id %s is malformed (want %s and up to 60 of [0-9a-z])", id, checkpoints.Prefix)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": id, "size": n})
}

// workerGetCheckpoint streams a recorded checkpoint of a run the worker
// holds (to restore it).
func (s *Server) workerGetCheckpoint(w http.ResponseWriter, r *http.Request) error {
	blobs, err := s.checkpointBlobs()
	if err != nil {
		return err
	}
	run, err := s.heldRun(r)
	if err != nil {
		return err
	}
	c, err := s.cfg.Checkpoints.GetCheckpoint(r.Context(), r.PathValue("ck"))
	if err != nil {
		return err
	}
	if c.RunID != run.ID {
		return errdefs.NotFoundf("checkpoint %s not found for run %s", c.ID, run.ID)
	}
	rc, err := blobs.Get(r.Context(), c.ID)
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		s.log.Warn("stream checkpoint", "run_id", run.ID, "checkpoint", c.ID, "err", err)
	}
	return nil
}

// workerPark records that a WAITING run was parked (with its uploaded
// checkpoint), or why it stays as it is (a note).
func (s *Server) workerPark(w http.ResponseWriter, r *http.Request) error {
	var req worker.ParkRequest
	if err := decodeJSON(w, r, 1<<20, &req); err != nil {
		return err
	}
	if req.Checkpoint != nil {
		if _, err := s.checkpointBlobs(); err != nil {
			return err
		}
	}
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	if err := s.control.Park(r.Context(), r.PathValue("id"), req); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// workerRestoredCheckpoint records that a run the worker holds was
// restored from a checkpoint.
func (s *Server) workerRestoredCheckpoint(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.checkpointBlobs(); err != nil {
		return err
	}
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	if err := s.control.RestoredCheckpoint(r.Context(), r.PathValue("id"), r.PathValue("ck")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
