package postgres

import (
	"context"
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
	_, err := s.pool.Exec(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		k.ID, string(k.Kind), k.Project, k.Env, k.Name, k.SecretHash, store.EncodeGrants(k.Grants), store.Time(k.CreatedAt),
		store.TimePtr(k.ExpiresAt), store.TimePtr(k.RevokedAt), store.TimePtr(k.LastUsedAt))
	if err != nil {
		return fmt.Errorf("create API key %s: %w", k.ID, err)
	}
	return nil
}

func scanAPIKey(sc scanner) (apikeys.Key, error) {
	var k apikeys.Key
	var grants string
	if err := sc.Scan(&k.ID, &k.Kind, &k.Project, &k.Env, &k.Name, &k.SecretHash, &grants, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &k.LastUsedAt); err != nil {
		return k, err
	}
	k.CreatedAt = k.CreatedAt.UTC()
	k.ExpiresAt, k.RevokedAt, k.LastUsedAt = utcPtr(k.ExpiresAt), utcPtr(k.RevokedAt), utcPtr(k.LastUsedAt)
	var err error
	k.Grants, err = store.DecodeGrants(k.ID, grants)
	return k, err
}

// GetAPIKey implements apikeys.Store.
func (s *Store) GetAPIKey(ctx context.Context, id string) (apikeys.Key, error) {
	k, err := scanAPIKey(s.pool.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = $1`, id))
	if isNoRows(err) {
		return apikeys.Key{}, fmt.Errorf("get API key %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return apikeys.Key{}, fmt.Errorf("get API key %s: %w", id, err)
	}
	return k, nil
}

// ListAPIKeys implements apikeys.Store.
func (s *Store) ListAPIKeys(ctx context.Context) ([]apikeys.Key, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`)
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
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2`, store.Time(at), id)
	if err != nil {
		return apikeys.Key{}, fmt.Errorf("revoke API key %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return apikeys.Key{}, fmt.Errorf("revoke API key %s: %w", id, errdefs.ErrNotFound)
	}
	return s.GetAPIKey(ctx, id)
}

// TouchAPIKey implements apikeys.Store.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET last_used_at = $1
		WHERE id = $2 AND (last_used_at IS NULL OR last_used_at <= $3)`,
		store.Time(at), id, store.Time(at.Add(-apikeys.TouchInterval)))
	if err != nil {
		return false, fmt.Errorf("touch API key %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}
