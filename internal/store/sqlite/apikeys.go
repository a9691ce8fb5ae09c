package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/store"
)

var _ apikeys.Store = (*Store)(nil)

const apiKeyColumns = `id, kind, project, env, name, secret_hash, grants, created_at, expires_at, revoked_at, last_used_at`

// CreateAPIKey implements apikeys.Store.
func (s *Store) CreateAPIKey(ctx context.Context, k apikeys.Key) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			k.ID, string(k.Kind), k.Project, k.Env, k.Name, k.SecretHash, store.EncodeGrants(k.Grants), fmtTime(k.CreatedAt),
			fmtTimePtr(k.ExpiresAt), fmtTimePtr(k.RevokedAt), fmtTimePtr(k.LastUsedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("create API key %s: %w", k.ID, err)
	}
	return nil
}

func scanAPIKey(sc interface{ Scan(...any) error }) (apikeys.Key, error) {
	var k apikeys.Key
	var grants, created string
	var expires, revoked, used sql.NullString
	if err := sc.Scan(&k.ID, &k.Kind, &k.Project, &k.Env, &k.Name, &k.SecretHash, &grants, &created, &expires, &revoked, &used); err != nil {
		return k, err
	}
	var err error
	if k.Grants, err = store.DecodeGrants(k.ID, grants); err != nil {
		return k, err
	}
	if k.CreatedAt, err = parseTime(created); err != nil {
		return k, err
	}
	if k.ExpiresAt, err = parseTimePtr(expires); err != nil {
		return k, err
	}
	if k.RevokedAt, err = parseTimePtr(revoked); err != nil {
		return k, err
	}
	k.LastUsedAt, err = parseTimePtr(used)
	return k, err
}

// GetAPIKey implements apikeys.Store.
func (s *Store) GetAPIKey(ctx context.Context, id string) (apikeys.Key, error) {
	k, err := scanAPIKey(s.r.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return apikeys.Key{}, fmt.Errorf("get API key %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return apikeys.Key{}, fmt.Errorf("get API key %s: %w", id, err)
	}
	return k, nil
}

// ListAPIKeys implements apikeys.Store.
func (s *Store) ListAPIKeys(ctx context.Context) ([]apikeys.Key, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	defer rows.Close()
	var out []apikeys.Key
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list API keys: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeAPIKey implements apikeys.Store.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) (apikeys.Key, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, fmtTime(at), id)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return apikeys.Key{}, fmt.Errorf("revoke API key %s: %w", id, err)
	}
	if n == 0 {
		return apikeys.Key{}, fmt.Errorf("revoke API key %s: %w", id, errdefs.ErrNotFound)
	}
	return s.GetAPIKey(ctx, id)
}

// TouchAPIKey implements apikeys.Store.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) (bool, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET last_used_at = ?
			WHERE id = ? AND (last_used_at IS NULL OR last_used_at <= ?)`,
			fmtTime(at), id, fmtTime(at.Add(-apikeys.TouchInterval)))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("touch API key %s: %w", id, err)
	}
	return n == 1, nil
}
