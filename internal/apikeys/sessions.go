package apikeys

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

// SessionTTL is how long an owner session lasts.
const SessionTTL = 12 * time.Hour

// maxSessions bounds the sessions kept; the oldest goes first.
const maxSessions = 256

// Sessions are owner sessions of a browser, for helmr dev: a person signs
// in once with the owner credential and gets a session token (a cookie)
// standing for the owner. They live in memory, so a restart signs
// everyone out; only their SHA-256 hashes are kept.
type Sessions struct {
	ownerHash []byte
	now       func() time.Time

	mu      sync.Mutex
	expires map[[32]byte]time.Time
}

// NewSessions returns an empty session store for the owner credential
// ownerToken.
func NewSessions(ownerToken string) *Sessions {
	return &Sessions{ownerHash: hash(ownerToken), now: time.Now, expires: map[[32]byte]time.Time{}}
}

// Login checks the owner credential and returns a new session token and
// its expiry; any other credential is errdefs.ErrUnauthenticated.
func (s *Sessions) Login(credential string) (string, time.Time, error) {
	if subtle.ConstantTimeCompare(hash(credential), s.ownerHash) != 1 {
		return "", time.Time{}, fmt.Errorf("%w: only the owner credential signs in", errdefs.ErrUnauthenticated)
	}
	tok := "hks_" + random(32)
	now := s.now()
	exp := now.Add(SessionTTL)
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, e := range s.expires {
		if !now.Before(e) {
			delete(s.expires, h)
		}
	}
	for len(s.expires) >= maxSessions {
		var oldest [32]byte
		var at time.Time
		for h, e := range s.expires {
			if at.IsZero() || e.Before(at) {
				oldest, at = h, e
			}
		}
		delete(s.expires, oldest)
	}
	s.expires[sha256.Sum256([]byte(tok))] = exp
	return tok, exp, nil
}

// Authenticate returns the owner for a live session token.
func (s *Sessions) Authenticate(token string) (Principal, time.Time, error) {
	h := sha256.Sum256([]byte(token))
	s.mu.Lock()
	exp, ok := s.expires[h]
	s.mu.Unlock()
	switch {
	case !ok:
		return Principal{}, time.Time{}, fmt.Errorf("%w: unknown or ended session: sign in again at /dev/login", errdefs.ErrUnauthenticated)
	case !s.now().Before(exp):
		return Principal{}, time.Time{}, fmt.Errorf("%w: the session expired: sign in again at /dev/login", errdefs.ErrUnauthenticated)
	}
	return Principal{Owner: true}, exp, nil
}

// Logout ends a session.
func (s *Sessions) Logout(token string) {
	h := sha256.Sum256([]byte(token))
	s.mu.Lock()
	delete(s.expires, h)
	s.mu.Unlock()
}
