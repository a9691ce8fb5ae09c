-- 0003: the secrets vault (package vault). Values are sealed with a data
-- key; data keys are stored only wrapped by the operator's master key.
-- Keep in step with sqlite/migrations/0003_vault.sql.

CREATE TABLE vault_keys (
    version    INTEGER PRIMARY KEY,
    wrapped    BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE secrets (
    project     TEXT NOT NULL,
    env         TEXT NOT NULL,
    name        TEXT NOT NULL,
    key_version INTEGER NOT NULL REFERENCES vault_keys (version),
    ciphertext  BYTEA NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (project, env, name)
);
