package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// workerWindow is how far back GET /v1/workers looks for workers: one
// not seen for longer is forgotten by the listing (not by the store).
const workerWindow = 24 * time.Hour

// WorkerInfo is a worker in GET /v1/workers: what it last reported, and
// the runs it holds. Workers serve every project; SlotsInUse counts every
// run one holds, Runs lists those of the project environment asked for.
type WorkerInfo struct {
	runs.WorkerState
	SlotsInUse int `json:"slotsInUse"`
}

func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) error {
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	list, err := s.cfg.Runs.Workers(r.Context(), time.Now().Add(-workerWindow))
	if err != nil {
		return err
	}
	out := make([]WorkerInfo, 0, len(list))
	for _, ws := range list {
		wi := WorkerInfo{WorkerState: ws, SlotsInUse: len(ws.Held)}
		visible := []runs.HeldRun{}
		for _, h := range ws.Held {
			if h.Project == project && h.Env == env {
				visible = append(visible, h)
			}
		}
		wi.Held = visible
		out = append(out, wi)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"workers": out})
}

// DoctorFunc reports what `helmr doctor` says of the control plane's
// host: its isolation tiers, the runtime policy's choice, the egress
// policy and the workspace quota (the JSON of `helmr doctor --json`).
type DoctorFunc func(ctx context.Context) any

func (s *Server) doctor(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Doctor == nil {
		return errdefs.Unavailablef("this control plane has no doctor report")
	}
	return writeJSON(w, http.StatusOK, s.cfg.Doctor(r.Context()))
}
