-- 0008: API keys and worker credentials (package apikeys; kind 'api' or
-- 'worker'). Only the SHA-256 hash of a key's secret is stored; grants are
-- a JSON array of grant names (none for a worker credential, which has no
-- project or environment either).

CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL DEFAULT 'api',
    project      TEXT NOT NULL,
    env          TEXT NOT NULL,
    name         TEXT NOT NULL DEFAULT '',
    secret_hash  {{.Blob}} NOT NULL,
    grants       TEXT NOT NULL,
    created_at   {{.Time}} NOT NULL,
    expires_at   {{.Time}},
    revoked_at   {{.Time}},
    last_used_at {{.Time}}
);

CREATE INDEX api_keys_created ON api_keys (created_at, id);
