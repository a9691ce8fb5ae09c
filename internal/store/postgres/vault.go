package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/vault"
)

var _ vault.Store = (*Store)(nil)

// DataKeys implements vault.Store.
func (s *Store) DataKeys(ctx context.Context) ([]vault.DataKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT version, wrapped, created_at FROM vault_keys ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("data keys: %w", err)
	}
	defer rows.Close()
	var out []vault.DataKey
	for rows.Next() {
		var k vault.DataKey
		if err := rows.Scan(&k.Version, &k.Wrapped, &k.CreatedAt); err != nil {
			return nil, fmt.Errorf("data keys: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// AddDataKey implements vault.Store. The table lock serialises versions.
func (s *Store) AddDataKey(ctx context.Context, wrapped []byte) (vault.DataKey, error) {
	k := vault.DataKey{Wrapped: wrapped, CreatedAt: time.Now().UTC()}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE vault_keys IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) + 1 FROM vault_keys`).Scan(&k.Version); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO vault_keys (version, wrapped, created_at) VALUES ($1, $2, $3)`, k.Version, wrapped, k.CreatedAt)
		return err
	})
	if err != nil {
		return vault.DataKey{}, fmt.Errorf("add data key: %w", err)
	}
	return k, nil
}

// RewrapDataKeys implements vault.Store.
func (s *Store) RewrapDataKeys(ctx context.Context, keys []vault.DataKey) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE vault_keys IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM vault_keys`).Scan(&n); err != nil {
			return err
		}
		if n != len(keys) {
			return fmt.Errorf("re-wrap %d data keys, the store holds %d", len(keys), n)
		}
		for _, k := range keys {
			tag, err := tx.Exec(ctx, `UPDATE vault_keys SET wrapped = $1 WHERE version = $2`, k.Wrapped, k.Version)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("no data key %d", k.Version)
			}
		}
		return nil
	})
}

// PutSecret implements vault.Store.
func (s *Store) PutSecret(ctx context.Context, sec vault.Secret) (vault.Secret, error) {
	now := time.Now().UTC()
	err := s.pool.QueryRow(ctx, `INSERT INTO secrets (project, env, name, key_version, ciphertext, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6)
		ON CONFLICT (project, env, name) DO UPDATE SET key_version = excluded.key_version,
			ciphertext = excluded.ciphertext, updated_at = excluded.updated_at
		RETURNING created_at, updated_at`,
		sec.Project, sec.Env, sec.Name, sec.KeyVersion, sec.Ciphertext, now).Scan(&sec.CreatedAt, &sec.UpdatedAt)
	if err != nil {
		return vault.Secret{}, fmt.Errorf("put secret %s: %w", sec.Name, err)
	}
	return sec, nil
}

// GetSecret implements vault.Store.
func (s *Store) GetSecret(ctx context.Context, project, env, name string) (vault.Secret, error) {
	sec := vault.Secret{Project: project, Env: env, Name: name}
	err := s.pool.QueryRow(ctx, `SELECT key_version, ciphertext, created_at, updated_at FROM secrets
		WHERE project = $1 AND env = $2 AND name = $3`, project, env, name).Scan(&sec.KeyVersion, &sec.Ciphertext, &sec.CreatedAt, &sec.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return vault.Secret{}, fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return vault.Secret{}, fmt.Errorf("get secret %s: %w", name, err)
	}
	return sec, nil
}

// ListSecrets implements vault.Store.
func (s *Store) ListSecrets(ctx context.Context, project, env string) ([]vault.Secret, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, key_version, created_at, updated_at FROM secrets
		WHERE project = $1 AND env = $2 ORDER BY name`, project, env)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	var out []vault.Secret
	for rows.Next() {
		sec := vault.Secret{Project: project, Env: env}
		if err := rows.Scan(&sec.Name, &sec.KeyVersion, &sec.CreatedAt, &sec.UpdatedAt); err != nil {
			return nil, fmt.Errorf("list secrets: %w", err)
		}
		out = append(out, sec)
	}
	return out, rows.Err()
}

// DeleteSecret implements vault.Store.
func (s *Store) DeleteSecret(ctx context.Context, project, env, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM secrets WHERE project = $1 AND env = $2 AND name = $3`, project, env, name)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	return nil
}
