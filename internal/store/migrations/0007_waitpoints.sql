-- 0007: waitpoints (tokens, human waits, timers) of a project env and,
-- when a task created one, of its run (run_id, else ''). tags is a list
-- of strings ({{.Strings}}: text[] in PostgreSQL, a JSON array in SQLite);
-- schema and data are JSON kept as text (data is compared byte for byte:
-- the service canonicalizes it); callback_hash is the SHA-256 (hex) of
-- the callback URL's secret. timeout_at is when a waiting token or human
-- wait times out, or when a timer fires.

CREATE TABLE waitpoints (
    id              TEXT PRIMARY KEY,
    project         TEXT NOT NULL,
    env             TEXT NOT NULL,
    run_id          TEXT NOT NULL DEFAULT '',
    kind            TEXT NOT NULL,
    status          TEXT NOT NULL,
    display_text    TEXT NOT NULL DEFAULT '',
    schema          TEXT,
    tags            {{.Strings}},
    idempotency_key TEXT,
    timeout_at      {{.Time}},
    data            TEXT,
    reason          TEXT NOT NULL DEFAULT '',
    callback_hash   TEXT NOT NULL DEFAULT '',
    created_at      {{.Time}} NOT NULL,
    waited_at       {{.Time}},
    completed_at    {{.Time}}
);

CREATE UNIQUE INDEX waitpoints_idempotency ON waitpoints (project, env, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX waitpoints_project_env_created ON waitpoints (project, env, created_at DESC, id DESC);
CREATE INDEX waitpoints_run ON waitpoints (run_id, status) WHERE run_id <> '';
CREATE INDEX waitpoints_due ON waitpoints (timeout_at) WHERE status = 'WAITING' AND timeout_at IS NOT NULL;
{{- if .Postgres}}
CREATE INDEX waitpoints_tags ON waitpoints USING gin (tags);
{{- end}}
