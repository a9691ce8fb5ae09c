package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/vault"
)

// DataKeys implements vault.Store.
func (db *DB) DataKeys(ctx context.Context) ([]vault.DataKey, error) {
	rows, err := db.read().query(ctx, `SELECT version, wrapped, created_at FROM vault_keys ORDER BY version`)
	out, err := scanAll(rows, err, func(row scanner) (vault.DataKey, error) {
		var k vault.DataKey
		err := row.Scan(&k.Version, &k.Wrapped, timeCol{&k.CreatedAt})
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("data keys: %w", err)
	}
	return nilIfEmpty(out), nil
}

// AddDataKey implements vault.Store. The lock on vault_keys serializes
// versions.
func (db *DB) AddDataKey(ctx context.Context, wrapped []byte) (vault.DataKey, error) {
	k := vault.DataKey{Wrapped: wrapped, CreatedAt: Time(time.Time{})}
	err := db.write(ctx, func(tx txConn) error {
		if err := tx.lock(ctx, "vault_keys", ""); err != nil {
			return err
		}
		if err := tx.queryRow(ctx, `SELECT COALESCE(MAX(version), 0) + 1 FROM vault_keys`).Scan(&k.Version); err != nil {
			return err
		}
		_, err := tx.exec(ctx, `INSERT INTO vault_keys (version, wrapped, created_at) VALUES (?, ?, ?)`, k.Version, wrapped, k.CreatedAt)
		return err
	})
	if err != nil {
		return vault.DataKey{}, fmt.Errorf("add data key: %w", err)
	}
	return k, nil
}

// RewrapDataKeys implements vault.Store.
func (db *DB) RewrapDataKeys(ctx context.Context, keys []vault.DataKey) error {
	return db.write(ctx, func(tx txConn) error {
		if err := tx.lock(ctx, "vault_keys", ""); err != nil {
			return err
		}
		var n int
		if err := tx.queryRow(ctx, `SELECT COUNT(*) FROM vault_keys`).Scan(&n); err != nil {
			return err
		}
		if n != len(keys) {
			return fmt.Errorf("re-wrap %d data keys, the store holds %d", len(keys), n)
		}
		for _, k := range keys {
			c, err := tx.changed(ctx, `UPDATE vault_keys SET wrapped = ? WHERE version = ?`, k.Wrapped, k.Version)
			if err != nil {
				return err
			}
			if c != 1 {
				return fmt.Errorf("no data key %d", k.Version)
			}
		}
		return nil
	})
}

// PutSecret implements vault.Store.
func (db *DB) PutSecret(ctx context.Context, sec vault.Secret) (vault.Secret, error) {
	now := Time(time.Time{})
	rule, err := egressCol(sec.Egress)
	if err != nil {
		return vault.Secret{}, err
	}
	keep := `excluded.egress`
	if sec.KeepEgress {
		keep = `secrets.egress`
	}
	var stored string
	err = db.writer().queryRow(ctx, `INSERT INTO secrets (project, env, name, key_version, ciphertext, egress, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (project, env, name) DO UPDATE SET key_version = excluded.key_version,
			ciphertext = excluded.ciphertext, egress = `+keep+`, updated_at = excluded.updated_at
		RETURNING egress, created_at, updated_at`,
		sec.Project, sec.Env, sec.Name, sec.KeyVersion, sec.Ciphertext, rule, now, now).Scan(&stored, timeCol{&sec.CreatedAt}, timeCol{&sec.UpdatedAt})
	if err == nil {
		sec.KeepEgress = false
		sec.Egress, err = parseEgress(stored)
	}
	if err != nil {
		return vault.Secret{}, fmt.Errorf("put secret %s: %w", sec.Name, err)
	}
	return sec, nil
}

// GetSecret implements vault.Store.
func (db *DB) GetSecret(ctx context.Context, project, env, name string) (vault.Secret, error) {
	sec := vault.Secret{Project: project, Env: env, Name: name}
	var rule string
	err := db.read().queryRow(ctx, `SELECT key_version, ciphertext, egress, created_at, updated_at FROM secrets
		WHERE project = ? AND env = ? AND name = ?`, project, env, name).
		Scan(&sec.KeyVersion, &sec.Ciphertext, &rule, timeCol{&sec.CreatedAt}, timeCol{&sec.UpdatedAt})
	if errors.Is(err, sql.ErrNoRows) {
		return vault.Secret{}, fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	if err == nil {
		sec.Egress, err = parseEgress(rule)
	}
	if err != nil {
		return vault.Secret{}, fmt.Errorf("get secret %s: %w", name, err)
	}
	return sec, nil
}

// ListSecrets implements vault.Store.
func (db *DB) ListSecrets(ctx context.Context, project, env string) ([]vault.Secret, error) {
	rows, err := db.read().query(ctx, `SELECT name, key_version, egress, created_at, updated_at FROM secrets
		WHERE project = ? AND env = ? ORDER BY name`, project, env)
	out, err := scanAll(rows, err, func(row scanner) (vault.Secret, error) {
		sec := vault.Secret{Project: project, Env: env}
		var rule string
		err := row.Scan(&sec.Name, &sec.KeyVersion, &rule, timeCol{&sec.CreatedAt}, timeCol{&sec.UpdatedAt})
		if err == nil {
			sec.Egress, err = parseEgress(rule)
		}
		return sec, err
	})
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return nilIfEmpty(out), nil
}

// DeleteSecret implements vault.Store.
func (db *DB) DeleteSecret(ctx context.Context, project, env, name string) error {
	n, err := db.writer().changed(ctx, `DELETE FROM secrets WHERE project = ? AND env = ? AND name = ?`, project, env, name)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	return nil
}

// nilIfEmpty is list, or nil when it is empty (for the lists that have
// always been nil then).
func nilIfEmpty[T any](list []T) []T {
	if len(list) == 0 {
		return nil
	}
	return list
}

// egressCol is a secret's egress rule as stored: JSON, or "" for none.
func egressCol(e *vault.Egress) (string, error) {
	if e == nil {
		return "", nil
	}
	b, err := json.Marshal(e)
	return string(b), err
}

func parseEgress(s string) (*vault.Egress, error) {
	if s == "" {
		return nil, nil
	}
	var e vault.Egress
	if err := json.Unmarshal([]byte(s), &e); err != nil {
		return nil, fmt.Errorf("a secret's stored egress rule: %w", err)
	}
	return &e, nil
}
