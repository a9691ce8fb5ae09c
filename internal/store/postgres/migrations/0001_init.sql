-- 0001: deployments, their files and tasks; runs and their event log.
-- Times are timestamptz (microseconds, returned as UTC). JSON is stored
-- verbatim as text. Keep in step with sqlite/migrations/0001_init.sql.

CREATE TABLE deployments (
    id         text PRIMARY KEY,
    project    text NOT NULL,
    env        text NOT NULL,
    version    integer NOT NULL,
    manifest   text NOT NULL,
    created_at timestamptz NOT NULL,
    UNIQUE (project, env, version)
);

CREATE TABLE deployment_files (
    deployment_id text NOT NULL REFERENCES deployments (id),
    path          text NOT NULL,
    content       bytea NOT NULL,
    PRIMARY KEY (deployment_id, path)
);

CREATE TABLE tasks (
    deployment_id text NOT NULL REFERENCES deployments (id),
    task_id       text NOT NULL,
    project       text NOT NULL,
    env           text NOT NULL,
    spec          text NOT NULL,
    PRIMARY KEY (deployment_id, task_id)
);

-- deployment_id is not a foreign key: a run records which version it was
-- created from, and a run's history outlives any cleanup of deployments.
CREATE TABLE runs (
    id                 text PRIMARY KEY,
    project            text NOT NULL,
    env                text NOT NULL,
    task_id            text NOT NULL,
    deployment_id      text NOT NULL,
    deployment_version integer NOT NULL,
    status             text NOT NULL,
    payload            text,
    output             text,
    error              text,
    idempotency_key    text,
    worker_id          text NOT NULL DEFAULT '',
    tier               text NOT NULL DEFAULT '',
    max_duration_sec   integer NOT NULL,
    created_at         timestamptz NOT NULL,
    started_at         timestamptz,
    finished_at        timestamptz,
    last_seq           bigint NOT NULL
);

CREATE UNIQUE INDEX runs_idempotency ON runs (project, env, task_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_project_env_created ON runs (project, env, created_at DESC, id DESC);
CREATE INDEX runs_queued ON runs (created_at, id) WHERE status = 'QUEUED';

CREATE TABLE run_events (
    run_id text NOT NULL REFERENCES runs (id),
    seq    bigint NOT NULL,
    type   text NOT NULL,
    time   timestamptz NOT NULL,
    data   text,
    PRIMARY KEY (run_id, seq)
);
