-- 0022: what the E2B-compatible API (package e2b) keeps of a sandbox
-- beyond its workspace (id = the workspace's id): the template it was
-- created from, its metadata and environment variables (JSON objects of
-- strings), whether it pauses rather than dies at end_at, and end_at, when
-- its timeout ends (the reaper deletes or pauses it then).

CREATE TABLE e2b_sandboxes (
    id          TEXT PRIMARY KEY,
    project     TEXT NOT NULL,
    env         TEXT NOT NULL,
    template_id TEXT NOT NULL,
    metadata    TEXT NOT NULL DEFAULT '{}',
    env_vars    TEXT NOT NULL DEFAULT '{}',
    auto_pause  INTEGER NOT NULL DEFAULT 0,
    started_at  {{.Time}} NOT NULL,
    end_at      {{.Time}} NOT NULL
);

CREATE INDEX e2b_sandboxes_project_env ON e2b_sandboxes (project, env, id DESC);
CREATE INDEX e2b_sandboxes_end ON e2b_sandboxes (end_at);
