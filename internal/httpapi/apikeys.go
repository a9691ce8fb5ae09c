package httpapi

import (
	"net/http"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/errdefs"
)

// The API key endpoints are the owner's: a key never sees, makes or
// revokes keys. No response but creation's carries a key, and only the
// key just made, once.

// CreateAPIKeyResponse is the answer to POST /v1/apikeys.
type CreateAPIKeyResponse struct {
	// Key is the API key itself: shown here once, stored only as a hash.
	Key    string      `json:"key"`
	APIKey apikeys.Key `json:"apiKey"`
}

func (s *Server) keys() (*apikeys.Service, error) {
	if s.cfg.APIKeys == nil {
		return nil, errdefs.Unavailablef("this control plane does not manage API keys")
	}
	return s.cfg.APIKeys, nil
}

func (s *Server) createAPIKey(w http.ResponseWriter, r *http.Request) error {
	ks, err := s.keys()
	if err != nil {
		return err
	}
	var req apikeys.CreateRequest
	if err := decodeJSON(w, r, 64<<10, &req); err != nil {
		return err
	}
	k, tok, err := ks.Create(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusCreated, CreateAPIKeyResponse{Key: tok, APIKey: k})
}

func (s *Server) listAPIKeys(w http.ResponseWriter, r *http.Request) error {
	ks, err := s.keys()
	if err != nil {
		return err
	}
	list, err := ks.List(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []apikeys.Key{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"apiKeys": list})
}

func (s *Server) revokeAPIKey(w http.ResponseWriter, r *http.Request) error {
	ks, err := s.keys()
	if err != nil {
		return err
	}
	k, err := ks.Revoke(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, k)
}

func (s *Server) createWorkerCredential(w http.ResponseWriter, r *http.Request) error {
	ks, err := s.keys()
	if err != nil {
		return err
	}
	var req apikeys.CreateWorkerRequest
	if err := decodeJSON(w, r, 64<<10, &req); err != nil {
		return err
	}
	k, tok, err := ks.CreateWorker(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusCreated, CreateAPIKeyResponse{Key: tok, APIKey: k})
}
