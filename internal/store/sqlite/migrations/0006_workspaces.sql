-- 0006: workspaces, durable project-environment objects that runs attach
-- to. worker_id is where the workspace's files are (empty until used).
-- Keep in step with postgres/migrations/0006_workspaces.sql.

CREATE TABLE workspaces (
    id          TEXT PRIMARY KEY,
    project     TEXT NOT NULL,
    env         TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    worker_id   TEXT NOT NULL DEFAULT '',
    last_run_id TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL,
    used_at     TEXT,
    deleted_at  TEXT
);

CREATE INDEX workspaces_project_env ON workspaces (project, env, created_at DESC, id DESC);

ALTER TABLE runs ADD COLUMN workspace_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN need_worker TEXT NOT NULL DEFAULT '';

CREATE INDEX runs_workspace ON runs (workspace_id, created_at DESC) WHERE workspace_id <> '';
