package apikeys

import (
	"errors"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

func TestSessions(t *testing.T) {
	owner := NewOwnerToken()
	s := NewSessions(owner)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	if _, _, err := s.Login(owner + "x"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("Login(wrong) error = %v, want errdefs.ErrUnauthenticated", err)
	}
	tok, exp, err := s.Login(owner)
	if err != nil || !exp.Equal(now.Add(SessionTTL)) {
		t.Fatalf("Login(owner) = %v, %v", exp, err)
	}
	if p, _, err := s.Authenticate(tok); err != nil || !p.Owner {
		t.Errorf("Authenticate(session) = %+v, %v; want the owner", p, err)
	}
	now = now.Add(SessionTTL)
	if _, _, err := s.Authenticate(tok); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("Authenticate(expired session) error = %v, want errdefs.ErrUnauthenticated", err)
	}
	tok, _, _ = s.Login(owner)
	s.Logout(tok)
	if _, _, err := s.Authenticate(tok); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("Authenticate(after logout) error = %v, want errdefs.ErrUnauthenticated", err)
	}
	for range maxSessions + 10 {
		now = now.Add(time.Second)
		if _, _, err := s.Login(owner); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.expires); n > maxSessions {
		t.Errorf("%d sessions kept, want at most %d", n, maxSessions)
	}
}
