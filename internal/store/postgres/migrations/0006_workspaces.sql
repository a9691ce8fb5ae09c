-- 0006: workspaces, durable project-environment objects that runs attach
-- to. host is where the workspace's files are: a worker's host identity
-- (empty until used); runs of it need that host.
-- Keep in step with sqlite/migrations/0006_workspaces.sql.

CREATE TABLE workspaces (
    id          text PRIMARY KEY,
    project     text NOT NULL,
    env         text NOT NULL,
    task_id     text NOT NULL,
    host        text NOT NULL DEFAULT '',
    last_run_id text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    used_at     timestamptz,
    deleted_at  timestamptz
);

CREATE INDEX workspaces_project_env ON workspaces (project, env, created_at DESC, id DESC);

ALTER TABLE runs ADD COLUMN workspace_id text NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN need_host text NOT NULL DEFAULT '';

CREATE INDEX runs_workspace ON runs (workspace_id, created_at DESC) WHERE workspace_id <> '';
