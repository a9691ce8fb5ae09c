-- 0019: flow control (package runs, flow.go). Runs carry their queue,
-- concurrency key, priority, tags, delay (available_at), ttl
-- (expires_at), retry policy and attempts; holds_slot marks the runs that
-- take a queue slot (started, or waiting with their sandbox up: a parked
-- run holds none). Queues keep their limit and whether they are paused.

ALTER TABLE runs ADD COLUMN queue TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN concurrency_key TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN tags TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN available_at {{.Time}};
ALTER TABLE runs ADD COLUMN expires_at {{.Time}};
ALTER TABLE runs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
ALTER TABLE runs ADD COLUMN retry TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN attempts TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN holds_slot INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN idempotency_expires_at {{.Time}};

UPDATE runs SET holds_slot = 1 WHERE status IN ('STARTING', 'RUNNING', 'WAITING');
UPDATE runs SET queue = 'task/' || task_id WHERE kind = 'task';

DROP INDEX runs_queued;
CREATE INDEX runs_queued ON runs (priority DESC, created_at, id, need_cpu, need_memory) WHERE status = 'QUEUED';
CREATE INDEX runs_slots ON runs (project, env, queue, concurrency_key) WHERE holds_slot = 1;
CREATE INDEX runs_expiring ON runs (expires_at) WHERE status = 'QUEUED' AND expires_at IS NOT NULL;

CREATE TABLE queues (
    project           TEXT NOT NULL,
    env               TEXT NOT NULL,
    name              TEXT NOT NULL,
    concurrency_limit INTEGER NOT NULL DEFAULT 0,
    paused            INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (project, env, name)
);
