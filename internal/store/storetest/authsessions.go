package storetest

import (
	"testing"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/errdefs"
)

var authSessionTests = []storeTest{
	{"CreateGetDeleteAuthSession", testAuthSessions},
	{"TouchAuthSessionAtMostOncePerInterval", testTouchAuthSession},
	{"DeleteExpiredAuthSessions", testExpiredAuthSessions},
}

func authSession(token, keyID string, created time.Time, ttl time.Duration) apikeys.Session {
	return apikeys.Session{ID: apikeys.SessionID(token), KeyID: keyID, CreatedAt: created,
		ExpiresAt: created.Add(ttl), LastSeenAt: created}
}

func testAuthSessions(t *testing.T, s Store) {
	ctx := t.Context()
	owner := authSession("hks_owner", "", at(0).Add(123456789*time.Nanosecond), time.Hour)
	key := authSession("hks_key", "kkkk", at(1), time.Hour)
	for _, sess := range []apikeys.Session{owner, key} {
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatalf("CreateSession(%q): %v", sess.KeyID, err)
		}
	}
	if err := s.CreateSession(ctx, key); err == nil {
		t.Errorf("CreateSession(duplicate id) = nil, want an error")
	}
	owner.CreatedAt = owner.CreatedAt.Truncate(time.Microsecond)
	owner.ExpiresAt = owner.ExpiresAt.Truncate(time.Microsecond)
	owner.LastSeenAt = owner.LastSeenAt.Truncate(time.Microsecond)
	for _, want := range []apikeys.Session{owner, key} {
		got, err := s.GetSession(ctx, want.ID)
		if err != nil {
			t.Fatalf("GetSession(%s): %v", want.ID, err)
		}
		if d := diff(want, got); d != "" {
			t.Errorf("GetSession(%s) (-want +got):\n%s", want.ID, d)
		}
	}
	_, err := s.GetSession(ctx, apikeys.SessionID("hks_nope"))
	wantErr(t, "GetSession(unknown)", err, errdefs.ErrNotFound)
	if err := s.DeleteSession(ctx, key.ID); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	_, err = s.GetSession(ctx, key.ID)
	wantErr(t, "GetSession(deleted)", err, errdefs.ErrNotFound)
	if err := s.DeleteSession(ctx, key.ID); err != nil {
		t.Errorf("DeleteSession(deleted) = %v, want nil", err)
	}
	if _, err := s.GetSession(ctx, owner.ID); err != nil {
		t.Errorf("GetSession(owner) after deleting another = %v, want it kept", err)
	}
}

func testTouchAuthSession(t *testing.T, s Store) {
	ctx := t.Context()
	sess := authSession("hks_t", "", at(0), time.Hour)
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		at   time.Time
		want bool
	}{
		{at(30), false}, // within SeenInterval of creation
		{at(60), true},
		{at(90), false},
		{at(121), true},
	} {
		wrote, err := s.TouchSession(ctx, sess.ID, c.at)
		if err != nil || wrote != c.want {
			t.Errorf("TouchSession(%v) = %v, %v; want %v", c.at, wrote, err, c.want)
		}
	}
	got, err := s.GetSession(ctx, sess.ID)
	if err != nil || !got.LastSeenAt.Equal(at(121)) {
		t.Errorf("GetSession().LastSeenAt = %v, %v; want %v", got.LastSeenAt, err, at(121))
	}
	if wrote, err := s.TouchSession(ctx, apikeys.SessionID("hks_nope"), at(500)); err != nil || wrote {
		t.Errorf("TouchSession(unknown) = %v, %v; want false, nil", wrote, err)
	}
}

func testExpiredAuthSessions(t *testing.T, s Store) {
	ctx := t.Context()
	short := authSession("hks_short", "", at(0), time.Minute)
	long := authSession("hks_long", "k", at(0), time.Hour)
	for _, sess := range []apikeys.Session{short, long} {
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.DeleteExpiredSessions(ctx, at(59)); err != nil || n != 0 {
		t.Errorf("DeleteExpiredSessions(+59s) = %d, %v; want 0", n, err)
	}
	if n, err := s.DeleteExpiredSessions(ctx, at(60)); err != nil || n != 1 {
		t.Errorf("DeleteExpiredSessions(+60s) = %d, %v; want 1 (the one expiring then)", n, err)
	}
	_, err := s.GetSession(ctx, short.ID)
	wantErr(t, "GetSession(swept)", err, errdefs.ErrNotFound)
	if _, err := s.GetSession(ctx, long.ID); err != nil {
		t.Errorf("GetSession(live) after the sweep = %v, want it kept", err)
	}
}
