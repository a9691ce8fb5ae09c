package apikeys_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/errdefs"
)

// TestSessions signs in with the owner credential and with an API key and
// follows the sessions through expiry, sign-out and the key's revocation.
func TestSessions(t *testing.T) {
	ctx := t.Context()
	owner := apikeys.NewOwnerToken()
	keys, st := newService(t, owner)
	ss := apikeys.NewSessions(st, keys, time.Hour, nil)
	now := time.Now().UTC().Truncate(time.Microsecond)
	ss.Now = func() time.Time { return now }

	for name, bad := range map[string]string{"wrong": owner + "x", "empty": ""} {
		if _, _, err := ss.Login(ctx, bad); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("Login(%s) error = %v, want errdefs.ErrUnauthenticated", name, err)
		}
	}
	_, worker, err := keys.CreateWorker(ctx, apikeys.CreateWorkerRequest{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ss.Login(ctx, worker); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("Login(worker credential) error = %v, want errdefs.ErrUnauthenticated", err)
	}

	tok, info, err := ss.Login(ctx, owner)
	if err != nil || !info.Principal.Owner || !info.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("Login(owner) = %+v, %v; want the owner for an hour", info, err)
	}
	if !strings.HasPrefix(tok, "hks_") {
		t.Errorf("session token %q, want hks_...", tok)
	}
	if _, err := st.GetSession(ctx, tok); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the store finds a session by its token (%v): want only its hash stored", err)
	}
	if got, err := ss.Authenticate(ctx, tok); err != nil || !got.Principal.Owner {
		t.Errorf("Authenticate(owner session) = %+v, %v; want the owner", got, err)
	}
	now = now.Add(time.Hour)
	if _, err := ss.Authenticate(ctx, tok); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("Authenticate(expired session) error = %v, want errdefs.ErrUnauthenticated", err)
	}
	if _, err := st.GetSession(ctx, apikeys.SessionID(tok)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSession(expired, seen) = %v, want the row deleted", err)
	}

	tok, _, err = ss.Login(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	if err := ss.Logout(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Authenticate(ctx, tok); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("Authenticate(after logout) error = %v, want errdefs.ErrUnauthenticated", err)
	}

	// A key's session: its grants and scope, no later than the key, and
	// over when the key is revoked.
	k, key, err := keys.Create(ctx, apikeys.CreateRequest{Project: "p", Env: "prod", Name: "ci", Grants: []string{"runs:read"}, ExpiresIn: "30m"})
	if err != nil {
		t.Fatal(err)
	}
	ss.Now = time.Now
	tok, info, err = ss.Login(ctx, key)
	if err != nil || info.Principal.KeyID != k.ID || !info.ExpiresAt.Equal(*k.ExpiresAt) || info.Key == nil || info.Key.Name != "ci" {
		t.Fatalf("Login(key) = %+v, %v; want key %s until its expiry %v", info, err, k.ID, k.ExpiresAt)
	}
	got, err := ss.Authenticate(ctx, tok)
	if p := got.Principal; err != nil || p.Owner || !p.Has(apikeys.RunsRead) || p.Has(apikeys.RunsCreate) || !p.InScope("p", "prod") || p.InScope("p", "dev") {
		t.Errorf("Authenticate(key session) = %+v, %v; want the key's grants and scope", p, err)
	}
	if _, err := keys.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Authenticate(ctx, tok); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("Authenticate(session of a revoked key) error = %v, want errdefs.ErrUnauthenticated", err)
	}
}

// TestSessionsSweep: a sign-in deletes the sessions that expired.
func TestSessionsSweep(t *testing.T) {
	ctx := t.Context()
	owner := apikeys.NewOwnerToken()
	keys, st := newService(t, owner)
	ss := apikeys.NewSessions(st, keys, 0, nil)
	now := time.Now()
	ss.Now = func() time.Time { return now }
	old, _, err := ss.Login(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(apikeys.DefaultSessionTTL)
	if _, _, err := ss.Login(ctx, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetSession(ctx, apikeys.SessionID(old)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSession(expired) after a sign-in = %v, want it swept", err)
	}
}
