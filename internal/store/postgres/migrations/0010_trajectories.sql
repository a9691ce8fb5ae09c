-- 0010: workspace trajectories: every direct operation on a workspace
-- (its request, its redacted result, timing), in order.
-- Keep in step with sqlite/migrations/0010_trajectories.sql.

CREATE TABLE workspace_ops (
    workspace_id text NOT NULL,
    seq          bigint NOT NULL,
    kind         text NOT NULL,
    request      text NOT NULL,
    result       text,
    error        text NOT NULL DEFAULT '',
    started_at   timestamptz NOT NULL,
    duration_ms  double precision NOT NULL,
    PRIMARY KEY (workspace_id, seq)
);
