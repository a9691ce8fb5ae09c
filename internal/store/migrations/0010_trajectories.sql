-- 0010: workspace trajectories: every direct operation on a workspace
-- (its request, its redacted result, timing), in order.

CREATE TABLE workspace_ops (
    workspace_id TEXT NOT NULL,
    seq          {{.BigInt}} NOT NULL,
    kind         TEXT NOT NULL,
    request      TEXT NOT NULL,
    result       TEXT,
    error        TEXT NOT NULL DEFAULT '',
    started_at   {{.Time}} NOT NULL,
    duration_ms  {{.Real}} NOT NULL,
    PRIMARY KEY (workspace_id, seq)
);
