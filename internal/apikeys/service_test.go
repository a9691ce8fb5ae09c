package apikeys_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/store/sqlite"
)

func newService(t *testing.T, owner string) (*apikeys.Service, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "helmr.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return apikeys.NewService(st, owner, nil), st
}

func TestCreateAuthenticateRevoke(t *testing.T) {
	ctx := t.Context()
	owner := apikeys.NewOwnerToken()
	s, st := newService(t, owner)
	k, tok, err := s.Create(ctx, apikeys.CreateRequest{Project: "p", Env: "prod", Name: "ci", Grants: []string{"runs:read"}, ExpiresIn: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "hk_"+k.ID+"_") || k.ExpiresAt == nil || time.Until(*k.ExpiresAt) < 59*time.Minute {
		t.Errorf("Create() = %+v, %q; want key hk_<id>_... expiring in an hour", k, tok)
	}
	stored, _ := st.GetAPIKey(ctx, k.ID)
	if strings.Contains(string(stored.SecretHash), tok[len(tok)-52:]) || len(stored.SecretHash) != 32 {
		t.Errorf("stored secret hash = %x, want 32 bytes of SHA-256, not the secret", stored.SecretHash)
	}
	if data, _ := json.Marshal(stored); strings.Contains(string(data), "ash") {
		t.Errorf("key JSON %s shows its hash", data)
	}
	p, err := s.Authenticate(ctx, tok)
	if err != nil || p.Owner || p.KeyID != k.ID || !p.Has(apikeys.RunsRead) || p.Has(apikeys.RunsCreate) ||
		!p.InScope("p", "prod") || p.InScope("p", "dev") {
		t.Errorf("Authenticate(key) = %+v, %v", p, err)
	}
	if p, err := s.Authenticate(ctx, owner); err != nil || !p.Owner || !p.Has(apikeys.TasksDeploy) || !p.InScope("q", "x") {
		t.Errorf("Authenticate(owner) = %+v, %v", p, err)
	}
	wrongSecret := tok[:len(tok)-1] + map[bool]string{true: "a", false: "b"}[tok[len(tok)-1] != 'a']
	for name, bad := range map[string]string{"empty": "", "malformed": "hk_nope", "wrong secret": wrongSecret,
		"unknown id": "hk_0000000000000000_" + tok[len(tok)-52:], "owner prefix": owner[:len(owner)-1]} {
		if _, err := s.Authenticate(ctx, bad); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("Authenticate(%s) error = %v, want errdefs.ErrUnauthenticated", name, err)
		} else if strings.Contains(err.Error(), bad) && bad != "" {
			t.Errorf("Authenticate(%s) error %q repeats the credential", name, err)
		}
	}
	if _, err := s.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, tok); !errors.Is(err, errdefs.ErrUnauthenticated) || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("Authenticate(revoked key) error = %v, want revoked", err)
	}
	if _, err := s.Revoke(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Revoke(nope) error = %v, want errdefs.ErrNotFound", err)
	}
}

func TestExpiredKeyAndLastUsed(t *testing.T) {
	ctx := t.Context()
	s, st := newService(t, "")
	k, tok, err := s.Create(ctx, apikeys.CreateRequest{Project: "p", Env: "dev", Grants: []string{"runs:read"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Authenticate(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := st.GetAPIKey(ctx, k.ID)
	if got.LastUsedAt == nil || time.Since(*got.LastUsedAt) > time.Minute {
		t.Errorf("last used after three requests = %v, want about now", got.LastUsedAt)
	}
	// An expired key, written straight to the store.
	past := time.Now().Add(-time.Second)
	exp := got
	exp.ID, exp.ExpiresAt = "0000000000000001", &past
	if err := st.CreateAPIKey(ctx, exp); err != nil {
		t.Fatal(err)
	}
	expTok := "hk_" + exp.ID + tok[len("hk_")+16:]
	if _, err := s.Authenticate(ctx, expTok); !errors.Is(err, errdefs.ErrUnauthenticated) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Authenticate(expired key) error = %v, want expired", err)
	}
}

func TestCreateRefusesBadInput(t *testing.T) {
	ctx := t.Context()
	s, st := newService(t, "")
	for _, req := range []apikeys.CreateRequest{
		{Project: "p", Env: "prod", Grants: []string{"runs:delete"}},
		{Project: "p", Env: "prod"},
		{Project: "p", Env: "prod", Grants: []string{"runs:read"}, ExpiresIn: "forever"},
		{Project: "p/..", Env: "prod", Grants: []string{"runs:read"}},
		{Project: "p", Env: "", Grants: []string{"runs:read"}},
		{Project: "p", Env: "prod", Name: "has space", Grants: []string{"runs:read"}},
	} {
		if _, tok, err := s.Create(ctx, req); !errors.Is(err, errdefs.ErrInvalid) || tok != "" {
			t.Errorf("Create(%+v) = %q, %v; want errdefs.ErrInvalid", req, tok, err)
		}
	}
	if ks, _ := st.ListAPIKeys(ctx); len(ks) != 0 {
		t.Errorf("%d keys stored after bad requests, want 0", len(ks))
	}
}

func TestWorkerCredential(t *testing.T) {
	ctx := t.Context()
	s, _ := newService(t, "")
	k, tok, err := s.CreateWorker(ctx, apikeys.CreateWorkerRequest{Name: "w1"})
	if err != nil || k.Kind != apikeys.KindWorker || !strings.HasPrefix(tok, "hw_"+k.ID+"_") {
		t.Fatalf("CreateWorker() = %+v, %q, %v", k, tok, err)
	}
	p, err := s.Authenticate(ctx, tok)
	if err != nil || !p.Worker || p.KeyID != k.ID || p.WorkerPrefix() != k.ID+"." || p.Has(apikeys.RunsRead) || p.InScope("", "") {
		t.Errorf("Authenticate(worker credential) = %+v, %v; want a worker without grants or scope", p, err)
	}
	// The same id and secret under the other prefix is no key.
	if _, err := s.Authenticate(ctx, "hk_"+tok[3:]); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("Authenticate(worker credential as hk_) error = %v, want errdefs.ErrUnauthenticated", err)
	}
	if _, _, err := s.CreateWorker(ctx, apikeys.CreateWorkerRequest{ExpiresIn: "1y"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("CreateWorker(expires 1y) error = %v, want errdefs.ErrInvalid", err)
	}
}

// TestE2BKey: a key made with E2B set is answered as e2b_<hex>, signs in
// as the key it is, and stops when that key is revoked.
func TestE2BKey(t *testing.T) {
	ctx := t.Context()
	s, _ := newService(t, apikeys.NewOwnerToken())
	k, tok, err := s.Create(ctx, apikeys.CreateRequest{Project: "p", Env: "dev", Grants: []string{"workspaces:exec"}, E2B: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, apikeys.E2BPrefix) {
		t.Fatalf("Create(E2B) = %q, want the e2b_ spelling", tok)
	}
	p, err := s.Authenticate(ctx, tok)
	if err != nil || p.KeyID != k.ID || p.Project != "p" || p.Env != "dev" {
		t.Fatalf("Authenticate(e2b key) = %+v, %v", p, err)
	}
	if _, err := s.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, tok); err == nil {
		t.Error("a revoked key's e2b spelling still signs in")
	}
}
