package store

import (
	"context"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/errdefs"
)

const sessionColumns = `id, key_id, created_at, expires_at, last_seen_at`

// CreateSession implements apikeys.SessionStore.
func (db *DB) CreateSession(ctx context.Context, s apikeys.Session) error {
	_, err := db.writer().exec(ctx, `INSERT INTO auth_sessions (`+sessionColumns+`) VALUES (?, ?, ?, ?, ?)`,
		s.ID, s.KeyID, Time(s.CreatedAt), Time(s.ExpiresAt), Time(s.LastSeenAt))
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	return nil
}

// GetSession implements apikeys.SessionStore.
func (db *DB) GetSession(ctx context.Context, id string) (apikeys.Session, error) {
	var s apikeys.Session
	err := db.read().queryRow(ctx, `SELECT `+sessionColumns+` FROM auth_sessions WHERE id = ?`, id).
		Scan(&s.ID, &s.KeyID, timeCol{&s.CreatedAt}, timeCol{&s.ExpiresAt}, timeCol{&s.LastSeenAt})
	if err != nil {
		return apikeys.Session{}, wrap(err, errdefs.ErrNotFound, "get session")
	}
	return s, nil
}

// TouchSession implements apikeys.SessionStore.
func (db *DB) TouchSession(ctx context.Context, id string, at time.Time) (bool, error) {
	n, err := db.writer().changed(ctx, `UPDATE auth_sessions SET last_seen_at = ? WHERE id = ? AND last_seen_at <= ?`,
		Time(at), id, Time(at.Add(-apikeys.SeenInterval)))
	if err != nil {
		return false, fmt.Errorf("touch session: %w", err)
	}
	return n == 1, nil
}

// DeleteSession implements apikeys.SessionStore.
func (db *DB) DeleteSession(ctx context.Context, id string) error {
	if _, err := db.writer().exec(ctx, `DELETE FROM auth_sessions WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// DeleteExpiredSessions implements apikeys.SessionStore.
func (db *DB) DeleteExpiredSessions(ctx context.Context, at time.Time) (int, error) {
	n, err := db.writer().changed(ctx, `DELETE FROM auth_sessions WHERE expires_at <= ?`, Time(at))
	if err != nil {
		return 0, fmt.Errorf("delete expired sessions: %w", err)
	}
	return int(n), nil
}
