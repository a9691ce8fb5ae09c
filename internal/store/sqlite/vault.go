package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/vault"
)

var _ vault.Store = (*Store)(nil)

// DataKeys implements vault.Store.
func (s *Store) DataKeys(ctx context.Context) ([]vault.DataKey, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT version, wrapped, created_at FROM vault_keys ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("data keys: %w", err)
	}
	defer rows.Close()
	var out []vault.DataKey
	for rows.Next() {
		var k vault.DataKey
		var at string
		if err := rows.Scan(&k.Version, &k.Wrapped, &at); err != nil {
			return nil, fmt.Errorf("data keys: %w", err)
		}
		if k.CreatedAt, err = parseTime(at); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// AddDataKey implements vault.Store.
func (s *Store) AddDataKey(ctx context.Context, wrapped []byte) (vault.DataKey, error) {
	k := vault.DataKey{Wrapped: wrapped, CreatedAt: time.Now()}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) + 1 FROM vault_keys`).Scan(&k.Version); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO vault_keys (version, wrapped, created_at) VALUES (?, ?, ?)`,
			k.Version, wrapped, fmtTime(k.CreatedAt))
		return err
	})
	if err != nil {
		return vault.DataKey{}, fmt.Errorf("add data key: %w", err)
	}
	return k, nil
}

// RewrapDataKeys implements vault.Store.
func (s *Store) RewrapDataKeys(ctx context.Context, keys []vault.DataKey) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM vault_keys`).Scan(&n); err != nil {
			return err
		}
		if n != len(keys) {
			return fmt.Errorf("re-wrap %d data keys, the store holds %d", len(keys), n)
		}
		for _, k := range keys {
			res, err := tx.ExecContext(ctx, `UPDATE vault_keys SET wrapped = ? WHERE version = ?`, k.Wrapped, k.Version)
			if err != nil {
				return err
			}
			if c, _ := res.RowsAffected(); c != 1 {
				return fmt.Errorf("no data key %d", k.Version)
			}
		}
		return nil
	})
}

// PutSecret implements vault.Store.
func (s *Store) PutSecret(ctx context.Context, sec vault.Secret) (vault.Secret, error) {
	now := time.Now()
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO secrets (project, env, name, key_version, ciphertext, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (project, env, name) DO UPDATE SET key_version = excluded.key_version,
				ciphertext = excluded.ciphertext, updated_at = excluded.updated_at`,
			sec.Project, sec.Env, sec.Name, sec.KeyVersion, sec.Ciphertext, fmtTime(now), fmtTime(now))
		return err
	})
	if err != nil {
		return vault.Secret{}, fmt.Errorf("put secret %s: %w", sec.Name, err)
	}
	return s.GetSecret(ctx, sec.Project, sec.Env, sec.Name)
}

// GetSecret implements vault.Store.
func (s *Store) GetSecret(ctx context.Context, project, env, name string) (vault.Secret, error) {
	sec := vault.Secret{Project: project, Env: env, Name: name}
	var created, updated string
	err := s.r.QueryRowContext(ctx, `SELECT key_version, ciphertext, created_at, updated_at FROM secrets
		WHERE project = ? AND env = ? AND name = ?`, project, env, name).Scan(&sec.KeyVersion, &sec.Ciphertext, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return vault.Secret{}, fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return vault.Secret{}, fmt.Errorf("get secret %s: %w", name, err)
	}
	if sec.CreatedAt, err = parseTime(created); err != nil {
		return vault.Secret{}, err
	}
	if sec.UpdatedAt, err = parseTime(updated); err != nil {
		return vault.Secret{}, err
	}
	return sec, nil
}

// ListSecrets implements vault.Store.
func (s *Store) ListSecrets(ctx context.Context, project, env string) ([]vault.Secret, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT name, key_version, created_at, updated_at FROM secrets
		WHERE project = ? AND env = ? ORDER BY name`, project, env)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	var out []vault.Secret
	for rows.Next() {
		sec := vault.Secret{Project: project, Env: env}
		var created, updated string
		if err := rows.Scan(&sec.Name, &sec.KeyVersion, &created, &updated); err != nil {
			return nil, fmt.Errorf("list secrets: %w", err)
		}
		if sec.CreatedAt, err = parseTime(created); err != nil {
			return nil, err
		}
		if sec.UpdatedAt, err = parseTime(updated); err != nil {
			return nil, err
		}
		out = append(out, sec)
	}
	return out, rows.Err()
}

// DeleteSecret implements vault.Store.
func (s *Store) DeleteSecret(ctx context.Context, project, env, name string) error {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM secrets WHERE project = ? AND env = ? AND name = ?`, project, env, name)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	return nil
}
