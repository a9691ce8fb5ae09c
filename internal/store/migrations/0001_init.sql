-- 0001: deployments, their files and tasks; runs and their event log.
-- Times are {{.Time}}: timestamptz in PostgreSQL; in SQLite, TEXT in
-- fixed-width UTC RFC 3339 with microseconds (2006-01-02T15:04:05.000000Z),
-- so they sort as text. JSON is stored verbatim as TEXT.

CREATE TABLE deployments (
    id         TEXT PRIMARY KEY,
    project    TEXT NOT NULL,
    env        TEXT NOT NULL,
    version    INTEGER NOT NULL,
    manifest   TEXT NOT NULL,
    created_at {{.Time}} NOT NULL,
    UNIQUE (project, env, version)
);

CREATE TABLE deployment_files (
    deployment_id TEXT NOT NULL REFERENCES deployments (id),
    path          TEXT NOT NULL,
    content       {{.Blob}} NOT NULL,
    PRIMARY KEY (deployment_id, path)
);

CREATE TABLE tasks (
    deployment_id TEXT NOT NULL REFERENCES deployments (id),
    task_id       TEXT NOT NULL,
    project       TEXT NOT NULL,
    env           TEXT NOT NULL,
    spec          TEXT NOT NULL,
    PRIMARY KEY (deployment_id, task_id)
);

-- deployment_id is not a foreign key: a run records which version it was
-- created from, and a run's history outlives any cleanup of deployments.
CREATE TABLE runs (
    id                 TEXT PRIMARY KEY,
    project            TEXT NOT NULL,
    env                TEXT NOT NULL,
    task_id            TEXT NOT NULL,
    deployment_id      TEXT NOT NULL,
    deployment_version INTEGER NOT NULL,
    status             TEXT NOT NULL,
    payload            TEXT,
    output             TEXT,
    error              TEXT,
    idempotency_key    TEXT,
    worker_id          TEXT NOT NULL DEFAULT '',
    tier               TEXT NOT NULL DEFAULT '',
    max_duration_sec   INTEGER NOT NULL,
    created_at         {{.Time}} NOT NULL,
    started_at         {{.Time}},
    finished_at        {{.Time}},
    last_seq           {{.BigInt}} NOT NULL
);

CREATE UNIQUE INDEX runs_idempotency ON runs (project, env, task_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_project_env_created ON runs (project, env, created_at DESC, id DESC);
CREATE INDEX runs_queued ON runs (created_at, id) WHERE status = 'QUEUED';

CREATE TABLE run_events (
    run_id TEXT NOT NULL REFERENCES runs (id),
    seq    {{.BigInt}} NOT NULL,
    type   TEXT NOT NULL,
    time   {{.Time}} NOT NULL,
    data   TEXT,
    PRIMARY KEY (run_id, seq)
){{.WithoutRowID}};
