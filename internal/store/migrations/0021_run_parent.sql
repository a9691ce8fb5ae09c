-- 0021: child runs (package runs, children.go). A run triggered from
-- inside a task (tasks.trigger and friends) names its parent and the root
-- of its tree; both are '' for a run triggered from outside. child_waits
-- lists, in order, the runs whose ends a waitpoint (kind "runs", the
-- parent's triggerAndWait) waits for: it completes with their results
-- once every one of them has ended.

ALTER TABLE runs ADD COLUMN parent_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN root_id TEXT NOT NULL DEFAULT '';

CREATE INDEX runs_parent ON runs (parent_id, created_at) WHERE parent_id <> '';

CREATE TABLE child_waits (
    waitpoint_id TEXT NOT NULL,
    idx          INTEGER NOT NULL,
    run_id       TEXT NOT NULL,
    PRIMARY KEY (waitpoint_id, idx)
);

CREATE INDEX child_waits_run ON child_waits (run_id);
