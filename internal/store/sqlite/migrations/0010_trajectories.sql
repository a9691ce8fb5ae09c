-- 0010: workspace trajectories: every direct operation on a workspace
-- (its request, its redacted result, timing), in order.
-- Keep in step with postgres/migrations/0010_trajectories.sql.

CREATE TABLE workspace_ops (
    workspace_id TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    kind         TEXT NOT NULL,
    request      TEXT NOT NULL,
    result       TEXT,
    error        TEXT NOT NULL DEFAULT '',
    started_at   TEXT NOT NULL,
    duration_ms  REAL NOT NULL,
    PRIMARY KEY (workspace_id, seq)
);
