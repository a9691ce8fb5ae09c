-- 0007: waitpoints (tokens, human waits, timers) of a project env and,
-- when a task created one, of its run (run_id, else ''). schema and data
-- are JSON kept as text (data is compared byte for byte: the service
-- canonicalizes it); callback_hash is the SHA-256 (hex) of the callback
-- URL's secret. timeout_at is when a waiting token or human wait times
-- out, or when a timer fires.
-- Keep in step with sqlite/migrations/0007_waitpoints.sql.

CREATE TABLE waitpoints (
    id              text PRIMARY KEY,
    project         text NOT NULL,
    env             text NOT NULL,
    run_id          text NOT NULL DEFAULT '',
    kind            text NOT NULL,
    status          text NOT NULL,
    display_text    text NOT NULL DEFAULT '',
    schema          text,
    tags            text[] NOT NULL DEFAULT '{}',
    idempotency_key text,
    timeout_at      timestamptz,
    data            text,
    reason          text NOT NULL DEFAULT '',
    callback_hash   text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    waited_at       timestamptz,
    completed_at    timestamptz
);

CREATE UNIQUE INDEX waitpoints_idempotency ON waitpoints (project, env, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX waitpoints_project_env_created ON waitpoints (project, env, created_at DESC, id DESC);
CREATE INDEX waitpoints_run ON waitpoints (run_id, status) WHERE run_id <> '';
CREATE INDEX waitpoints_due ON waitpoints (timeout_at) WHERE status = 'WAITING' AND timeout_at IS NOT NULL;
CREATE INDEX waitpoints_tags ON waitpoints USING gin (tags);
