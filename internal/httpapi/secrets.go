package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/vault"
)

// The vault's endpoints manage secrets by name and show metadata only: no
// response carries a value.

func (s *Server) secretsVault() (*vault.Vault, error) {
	if s.cfg.Vault == nil {
		return nil, errdefs.Unavailablef("this control plane has no vault: start it with HELMR_MASTER_KEY or HELMR_MASTER_KEY_FILE")
	}
	return s.cfg.Vault, nil
}

func (s *Server) setSecret(w http.ResponseWriter, r *http.Request) error {
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	v, err := s.secretsVault()
	if err != nil {
		return err
	}
	// egress: absent keeps the secret's rule, null places it in the
	// sandbox (ModeSandbox), an object binds it for egress.
	var body struct {
		Value  *string         `json:"value"`
		Egress json.RawMessage `json:"egress"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 2*vault.MaxValueBytes+64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.Value == nil {
		return errdefs.Invalidf(`the body must be {"value": "...", "egress": {"hosts": ["api.example.com"], "body": false}} (egress: absent keeps the secret's rule, null places the value in sandboxes)`)
	}
	var m vault.Meta
	if body.Egress == nil {
		m, err = v.Set(r.Context(), project, env, r.PathValue("name"), []byte(*body.Value))
	} else {
		var rule *vault.Egress
		rd := json.NewDecoder(bytes.NewReader(body.Egress))
		rd.DisallowUnknownFields()
		if err := rd.Decode(&rule); err != nil {
			return errdefs.Invalidf(`egress must be {"hosts": ["api.example.com", "*.example.com"], "body": false} or null: %v`, err)
		}
		m, err = v.SetWithEgress(r.Context(), project, env, r.PathValue("name"), []byte(*body.Value), rule)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, m)
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) error {
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	v, err := s.secretsVault()
	if err != nil {
		return err
	}
	ms, err := v.List(r.Context(), project, env)
	if err != nil {
		return err
	}
	if ms == nil {
		ms = []vault.Meta{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"secrets": ms})
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) error {
	project, env, err := scope(r)
	if err != nil {
		return err
	}
	v, err := s.secretsVault()
	if err != nil {
		return err
	}
	if err := v.Delete(r.Context(), project, env, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
