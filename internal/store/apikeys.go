package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/errdefs"
)

// EncodeGrants is a key's grants as stored (a JSON array).
func EncodeGrants(gs []apikeys.Grant) string {
	if gs == nil {
		gs = []apikeys.Grant{}
	}
	data, _ := json.Marshal(gs)
	return string(data)
}

// DecodeGrants reads stored grants.
func DecodeGrants(keyID, s string) ([]apikeys.Grant, error) {
	var gs []apikeys.Grant
	if err := json.Unmarshal([]byte(s), &gs); err != nil {
		return nil, fmt.Errorf("decode grants of API key %s: %w", keyID, err)
	}
	return gs, nil
}

const apiKeyColumns = `id, kind, project, env, name, secret_hash, grants, created_at, expires_at, revoked_at, last_used_at`

// CreateAPIKey implements apikeys.Store.
func (db *DB) CreateAPIKey(ctx context.Context, k apikeys.Key) error {
	_, err := db.writer().exec(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, string(k.Kind), k.Project, k.Env, k.Name, k.SecretHash, EncodeGrants(k.Grants), Time(k.CreatedAt),
		TimePtr(k.ExpiresAt), TimePtr(k.RevokedAt), TimePtr(k.LastUsedAt))
	if err != nil {
		return fmt.Errorf("create API key %s: %w", k.ID, err)
	}
	return nil
}

func scanAPIKey(row scanner) (apikeys.Key, error) {
	var k apikeys.Key
	var grants string
	if err := row.Scan(&k.ID, &k.Kind, &k.Project, &k.Env, &k.Name, &k.SecretHash, &grants, timeCol{&k.CreatedAt},
		nullTimeCol{&k.ExpiresAt}, nullTimeCol{&k.RevokedAt}, nullTimeCol{&k.LastUsedAt}); err != nil {
		return k, err
	}
	var err error
	k.Grants, err = DecodeGrants(k.ID, grants)
	return k, err
}

// GetAPIKey implements apikeys.Store.
func (db *DB) GetAPIKey(ctx context.Context, id string) (apikeys.Key, error) {
	k, err := scanAPIKey(db.read().queryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = ?`, id))
	if err != nil {
		return apikeys.Key{}, wrap(err, errdefs.ErrNotFound, "get API key %s", id)
	}
	return k, nil
}

// ListAPIKeys implements apikeys.Store.
func (db *DB) ListAPIKeys(ctx context.Context) ([]apikeys.Key, error) {
	rows, err := db.read().query(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`)
	out, err := scanAll(rows, err, scanAPIKey)
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	return nilIfEmpty(out), nil
}

// RevokeAPIKey implements apikeys.Store.
func (db *DB) RevokeAPIKey(ctx context.Context, id string, at time.Time) (apikeys.Key, error) {
	n, err := db.writer().changed(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, Time(at), id)
	if err != nil {
		return apikeys.Key{}, fmt.Errorf("revoke API key %s: %w", id, err)
	}
	if n == 0 {
		return apikeys.Key{}, fmt.Errorf("revoke API key %s: %w", id, errdefs.ErrNotFound)
	}
	return db.GetAPIKey(ctx, id)
}

// TouchAPIKey implements apikeys.Store.
func (db *DB) TouchAPIKey(ctx context.Context, id string, at time.Time) (bool, error) {
	n, err := db.writer().changed(ctx, `UPDATE api_keys SET last_used_at = ?
		WHERE id = ? AND (last_used_at IS NULL OR last_used_at <= ?)`,
		Time(at), id, Time(at.Add(-apikeys.TouchInterval)))
	if err != nil {
		return false, fmt.Errorf("touch API key %s: %w", id, err)
	}
	return n == 1, nil
}
