-- 0020: cron schedules that trigger a task's runs (package schedules).
-- type is DECLARATIVE (from a deployment's manifest, one per task, synced
-- by each deployment: deployment_version is the one that declared it) or
-- IMPERATIVE (API, CLI; deduplication_key makes creation an upsert).
-- active is 1 or 0. next_run_at is the next tick to fire (NULL while
-- inactive); a replica fires it by moving next_run_at on with a
-- compare-and-set and recording the tick as pending_tick until
-- pending_until, then clears it with the run made (last_run_*). A pending
-- tick whose claim lapsed is taken over and triggered again with the same
-- idempotency key.

CREATE TABLE schedules (
    id                 TEXT PRIMARY KEY,
    project            TEXT NOT NULL,
    env                TEXT NOT NULL,
    task_id            TEXT NOT NULL,
    type               TEXT NOT NULL,
    cron               TEXT NOT NULL,
    timezone           TEXT NOT NULL,
    external_id        TEXT NOT NULL DEFAULT '',
    deduplication_key  TEXT,
    active             INTEGER NOT NULL DEFAULT 1,
    deployment_version INTEGER NOT NULL DEFAULT 0,
    next_run_at        {{.Time}},
    last_run_at        {{.Time}},
    last_run_id        TEXT NOT NULL DEFAULT '',
    last_error         TEXT NOT NULL DEFAULT '',
    pending_tick       {{.Time}},
    pending_until      {{.Time}},
    created_at         {{.Time}} NOT NULL,
    updated_at         {{.Time}} NOT NULL
);

CREATE UNIQUE INDEX schedules_dedup ON schedules (project, env, deduplication_key)
    WHERE deduplication_key IS NOT NULL;
CREATE UNIQUE INDEX schedules_declared ON schedules (project, env, task_id)
    WHERE type = 'DECLARATIVE';
CREATE INDEX schedules_project_env_created ON schedules (project, env, created_at DESC, id DESC);
CREATE INDEX schedules_next ON schedules (next_run_at) WHERE active = 1;
CREATE INDEX schedules_pending ON schedules (pending_until) WHERE pending_tick IS NOT NULL;
