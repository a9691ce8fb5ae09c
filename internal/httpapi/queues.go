package httpapi

import (
	"net/http"
)

// Queues: a project environment's run queues, their limits and counts;
// pausing one stops it starting runs (those started go on).

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) error {
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	qs, err := s.cfg.Runs.Queues(r.Context(), project, env)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"queues": qs})
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request) error {
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	q, err := s.cfg.Runs.GetQueue(r.Context(), project, env, r.PathValue("name"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, q)
}

func (s *Server) pauseQueue(paused bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		project, env, err := scope(r)
		if err != nil {
			return err
		}
		q, err := s.cfg.Runs.PauseQueue(r.Context(), project, env, r.PathValue("name"), paused)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, q)
	}
}
