-- 0011: checkpoints of parked runs (package checkpoints): which run and
-- wait, the adapter's process and wait request in the saved sandbox, and
-- what a worker must be to restore it. The sealed bytes live in the blob
-- store under the checkpoint's id.

CREATE TABLE checkpoints (
    id           TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL REFERENCES runs (id),
    waitpoint_id TEXT NOT NULL,
    exec_id      BIGINT NOT NULL,
    request_id   BIGINT NOT NULL,
    arch         TEXT NOT NULL,
    tier         TEXT NOT NULL,
    kernel       TEXT NOT NULL,
    rootfs       TEXT NOT NULL,
    size         BIGINT NOT NULL,
    created_at   {{.Time}} NOT NULL
);

CREATE INDEX checkpoints_run ON checkpoints (run_id, created_at);
