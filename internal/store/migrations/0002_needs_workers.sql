-- 0002: what a run's sandbox needs of a worker, and the workers themselves.
-- LeaseRun takes the oldest QUEUED run whose needs fit a worker's offer, so
-- the queued index carries the needs: the fit test is checked on index
-- entries, in lease order, before any table row is read.

ALTER TABLE runs ADD COLUMN need_cpu {{.Real}} NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN need_memory {{.BigInt}} NOT NULL DEFAULT 0;

DROP INDEX runs_queued;
CREATE INDEX runs_queued ON runs (created_at, id, need_cpu, need_memory) WHERE status = 'QUEUED';

-- capabilities is workers.Capabilities as JSON, verbatim.
CREATE TABLE workers (
    id           TEXT PRIMARY KEY,
    capabilities TEXT NOT NULL,
    last_seen    {{.Time}} NOT NULL
);

CREATE INDEX workers_last_seen ON workers (last_seen);
