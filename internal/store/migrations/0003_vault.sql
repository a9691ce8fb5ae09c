-- 0003: the secrets vault (package vault). Values are sealed with a data
-- key; data keys are stored only wrapped by the operator's master key.

CREATE TABLE vault_keys (
    version    INTEGER PRIMARY KEY,
    wrapped    {{.Blob}} NOT NULL,
    created_at {{.Time}} NOT NULL
);

CREATE TABLE secrets (
    project     TEXT NOT NULL,
    env         TEXT NOT NULL,
    name        TEXT NOT NULL,
    key_version INTEGER NOT NULL REFERENCES vault_keys (version),
    ciphertext  {{.Blob}} NOT NULL,
    created_at  {{.Time}} NOT NULL,
    updated_at  {{.Time}} NOT NULL,
    PRIMARY KEY (project, env, name)
);
