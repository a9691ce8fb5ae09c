package apikeys

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

// DefaultSessionTTL is how long a browser session lasts unless the
// operator sets HELMR_SESSION_TTL.
const DefaultSessionTTL = 12 * time.Hour

// SeenInterval is how stale a session's last-seen time may get: a
// session in use has it written at most once per interval.
const SeenInterval = time.Minute

// Session is a browser's sign-in as stored: never its token, only the
// token's SHA-256 (ID). A session stands for the owner (KeyID empty) or
// for one API key, whose grants, scope, revocation and expiry apply to
// every request the session makes.
type Session struct {
	// ID is the hex SHA-256 of the session token.
	ID         string
	KeyID      string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	LastSeenAt time.Time
}

// SessionStore keeps browser sessions. Every replica of the control plane
// reads the same rows, so a session survives restarts and works on any
// replica.
type SessionStore interface {
	// CreateSession stores a new session.
	CreateSession(ctx context.Context, s Session) error
	// GetSession returns the session with id, or errdefs.ErrNotFound.
	GetSession(ctx context.Context, id string) (Session, error)
	// TouchSession sets the session's last-seen time to at, unless it is
	// already within SeenInterval before at; it reports whether it wrote.
	// An unknown id writes nothing.
	TouchSession(ctx context.Context, id string, at time.Time) (bool, error)
	// DeleteSession deletes a session; an unknown id is not an error.
	DeleteSession(ctx context.Context, id string) error
	// DeleteExpiredSessions deletes every session that expired at or
	// before at and returns how many it deleted.
	DeleteExpiredSessions(ctx context.Context, at time.Time) (int, error)
}

// Sessions signs browsers in with the owner credential or an API key and
// authenticates them by their session token (a cookie) afterwards.
type Sessions struct {
	store SessionStore
	keys  *Service
	ttl   time.Duration
	log   *slog.Logger
	// Now is the clock; tests set it.
	Now func() time.Time
}

// NewSessions returns the sessions of keys' credentials, kept in st,
// each lasting ttl (DefaultSessionTTL if 0).
func NewSessions(st SessionStore, keys *Service, ttl time.Duration, log *slog.Logger) *Sessions {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sessions{store: st, keys: keys, ttl: ttl, log: log, Now: time.Now}
}

// SessionInfo is what a signed-in browser is told about itself.
type SessionInfo struct {
	Principal Principal
	// Key is the API key the session stands for (nil for the owner).
	Key       *Key
	ExpiresAt time.Time
}

// Login checks credential (the owner credential or an API key; not a
// worker credential) and starts a session for it. It returns the session
// token, which exists nowhere else, and the session. Any credential that
// does not sign in is errdefs.ErrUnauthenticated. Expired sessions are
// swept on the way.
func (s *Sessions) Login(ctx context.Context, credential string) (string, SessionInfo, error) {
	now := s.Now().UTC()
	if n, err := s.store.DeleteExpiredSessions(ctx, now); err != nil {
		s.log.Warn("sweep expired sessions", "err", err)
	} else if n > 0 {
		s.log.Info("swept expired sessions", "sessions", n)
	}
	p, err := s.keys.Authenticate(ctx, credential)
	if err != nil {
		return "", SessionInfo{}, err
	}
	if p.Worker {
		return "", SessionInfo{}, fmt.Errorf("%w: a worker credential does not sign in", errdefs.ErrUnauthenticated)
	}
	info := SessionInfo{Principal: p, ExpiresAt: now.Add(s.ttl)}
	if !p.Owner {
		k, err := s.keys.store.GetAPIKey(ctx, p.KeyID)
		if err != nil {
			return "", SessionInfo{}, err
		}
		if k.ExpiresAt != nil && k.ExpiresAt.Before(info.ExpiresAt) {
			info.ExpiresAt = *k.ExpiresAt
		}
		info.Key = &k
	}
	tok := "hks_" + random(32)
	sess := Session{ID: SessionID(tok), KeyID: p.KeyID, CreatedAt: now, ExpiresAt: info.ExpiresAt, LastSeenAt: now}
	if err := s.store.CreateSession(ctx, sess); err != nil {
		return "", SessionInfo{}, err
	}
	s.log.Info("session started", "principal", p.String(), "session", sess.ID[:12], "expires", info.ExpiresAt)
	return tok, info, nil
}

// Authenticate returns the principal of a live session token. An
// unknown, expired or signed-out session, or one whose API key was
// revoked or expired, is errdefs.ErrUnauthenticated. The key is read from
// the store on every request (not through the Service's cache), so a key
// revoked on any replica ends its sessions at once.
func (s *Sessions) Authenticate(ctx context.Context, token string) (SessionInfo, error) {
	id := SessionID(token)
	sess, err := s.store.GetSession(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return SessionInfo{}, fmt.Errorf("%w: unknown or ended session: sign in again at /login", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return SessionInfo{}, err
	}
	now := s.Now()
	if !now.Before(sess.ExpiresAt) {
		if err := s.store.DeleteSession(ctx, id); err != nil {
			s.log.Warn("delete an expired session", "err", err)
		}
		return SessionInfo{}, fmt.Errorf("%w: the session expired: sign in again at /login", errdefs.ErrUnauthenticated)
	}
	info := SessionInfo{Principal: Principal{Owner: true}, ExpiresAt: sess.ExpiresAt}
	if sess.KeyID != "" {
		k, err := s.keys.store.GetAPIKey(ctx, sess.KeyID)
		if errors.Is(err, errdefs.ErrNotFound) {
			return SessionInfo{}, fmt.Errorf("%w: the session's API key is gone: sign in again at /login", errdefs.ErrUnauthenticated)
		}
		if err != nil {
			return SessionInfo{}, err
		}
		if info.Principal, err = s.keys.keyPrincipal(ctx, k, now); err != nil {
			return SessionInfo{}, err
		}
		info.Key = &k
	}
	if now.Sub(sess.LastSeenAt) >= SeenInterval {
		if _, err := s.store.TouchSession(ctx, id, now.UTC()); err != nil {
			s.log.Warn("record session use", "err", err)
		}
	}
	return info, nil
}

// Logout ends a session; an unknown token is not an error.
func (s *Sessions) Logout(ctx context.Context, token string) error {
	return s.store.DeleteSession(ctx, SessionID(token))
}

// SessionID is the stored id of a session token: its hex SHA-256.
func SessionID(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}
