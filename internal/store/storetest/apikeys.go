package storetest

import (
	"testing"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/errdefs"
)

var apiKeyTests = []storeTest{
	{"CreateGetListAPIKeys", testAPIKeys},
	{"RevokeAPIKey", testRevokeAPIKey},
	{"TouchAPIKeyAtMostOncePerInterval", testTouchAPIKey},
}

func apiKey(id string, created time.Time) apikeys.Key {
	return apikeys.Key{
		ID: id, Kind: apikeys.KindAPI, Project: "p", Env: "prod", Name: "ci-" + id,
		Grants:     []apikeys.Grant{apikeys.RunsCreate, apikeys.RunsRead},
		SecretHash: []byte("0123456789abcdef0123456789abcdef" + id)[:32],
		CreatedAt:  created,
	}
}

func testAPIKeys(t *testing.T, s Store) {
	ctx := t.Context()
	exp := at(3600).Add(123456789 * time.Nanosecond)
	b := apiKey("bbbb", at(2))
	b.ExpiresAt = &exp
	a := apiKey("aaaa", at(1)) // a worker credential: no project, env or grants
	a.Kind, a.Project, a.Env, a.Grants = apikeys.KindWorker, "", "", []apikeys.Grant{}
	for _, k := range []apikeys.Key{b, a} {
		if err := s.CreateAPIKey(ctx, k); err != nil {
			t.Fatalf("CreateAPIKey(%q): %v", k.ID, err)
		}
	}
	if err := s.CreateAPIKey(ctx, apiKey("aaaa", at(3))); err == nil {
		t.Errorf("CreateAPIKey(duplicate id) = nil, want an error")
	}
	b.ExpiresAt = ptr(exp.Truncate(time.Microsecond))
	got, err := s.GetAPIKey(ctx, "bbbb")
	if err != nil {
		t.Fatalf("GetAPIKey(bbbb): %v", err)
	}
	if d := diff(b, got); d != "" {
		t.Errorf("GetAPIKey(bbbb) (-want +got):\n%s", d)
	}
	_, err = s.GetAPIKey(ctx, "nope")
	wantErr(t, "GetAPIKey(nope)", err, errdefs.ErrNotFound)
	list, err := s.ListAPIKeys(ctx)
	if err != nil {
		t.Fatalf("ListAPIKeys: %v", err)
	}
	if d := diff([]apikeys.Key{a, b}, list); d != "" {
		t.Errorf("ListAPIKeys() (-want +got):\n%s", d)
	}
}

func testRevokeAPIKey(t *testing.T, s Store) {
	ctx := t.Context()
	if err := s.CreateAPIKey(ctx, apiKey("k", at(0))); err != nil {
		t.Fatal(err)
	}
	k, err := s.RevokeAPIKey(ctx, "k", at(10))
	if err != nil || k.RevokedAt == nil || !k.RevokedAt.Equal(at(10)) {
		t.Fatalf("RevokeAPIKey(k, +10s) = %v, %v; want revoked at %v", k.RevokedAt, err, at(10))
	}
	k, err = s.RevokeAPIKey(ctx, "k", at(20))
	if err != nil || k.RevokedAt == nil || !k.RevokedAt.Equal(at(10)) {
		t.Errorf("second RevokeAPIKey(k, +20s) = %v, %v; want the first time %v kept", k.RevokedAt, err, at(10))
	}
	_, err = s.RevokeAPIKey(ctx, "nope", at(10))
	wantErr(t, "RevokeAPIKey(nope)", err, errdefs.ErrNotFound)
}

func testTouchAPIKey(t *testing.T, s Store) {
	ctx := t.Context()
	if err := s.CreateAPIKey(ctx, apiKey("k", at(0))); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		at        time.Time
		wrote     bool
		wantStamp time.Time
	}{
		{at(100), true, at(100)},
		{at(130), false, at(100)},
		{at(159), false, at(100)},
		{at(160), true, at(160)},
		{at(300), true, at(300)},
	} {
		wrote, err := s.TouchAPIKey(ctx, "k", step.at)
		if err != nil || wrote != step.wrote {
			t.Errorf("TouchAPIKey(k, %v) = %v, %v; want %v", step.at, wrote, err, step.wrote)
		}
		k, err := s.GetAPIKey(ctx, "k")
		if err != nil || k.LastUsedAt == nil || !k.LastUsedAt.Equal(step.wantStamp) {
			t.Errorf("after TouchAPIKey(k, %v): last used %v, %v; want %v", step.at, k.LastUsedAt, err, step.wantStamp)
		}
	}
	if wrote, err := s.TouchAPIKey(ctx, "nope", at(1)); wrote || err != nil {
		t.Errorf("TouchAPIKey(nope) = %v, %v; want false, nil", wrote, err)
	}
}

func ptr[T any](v T) *T { return &v }
