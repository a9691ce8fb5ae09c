-- 0006: workspaces, durable project-environment objects that runs attach
-- to. host is where the workspace's files are: a worker's host identity
-- (empty until used); runs of it need that host.

CREATE TABLE workspaces (
    id          TEXT PRIMARY KEY,
    project     TEXT NOT NULL,
    env         TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    host        TEXT NOT NULL DEFAULT '',
    last_run_id TEXT NOT NULL DEFAULT '',
    created_at  {{.Time}} NOT NULL,
    used_at     {{.Time}},
    deleted_at  {{.Time}}
);

CREATE INDEX workspaces_project_env ON workspaces (project, env, created_at DESC, id DESC);

ALTER TABLE runs ADD COLUMN workspace_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN need_host TEXT NOT NULL DEFAULT '';

CREATE INDEX runs_workspace ON runs (workspace_id, created_at DESC) WHERE workspace_id <> '';
