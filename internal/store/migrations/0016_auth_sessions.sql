-- 0016: browser sessions (package apikeys, SessionStore). id is the hex
-- SHA-256 of the session token, which is never stored; key_id is the API
-- key the session stands for, '' for the owner.

CREATE TABLE auth_sessions (
    id           TEXT PRIMARY KEY,
    key_id       TEXT NOT NULL DEFAULT '',
    created_at   {{.Time}} NOT NULL,
    expires_at   {{.Time}} NOT NULL,
    last_seen_at {{.Time}} NOT NULL
);

CREATE INDEX auth_sessions_expires ON auth_sessions (expires_at);
