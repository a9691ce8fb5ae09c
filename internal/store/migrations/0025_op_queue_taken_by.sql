-- 0025: which worker took a queued workspace operation, so that the
-- replica waiting for its result can tell when that worker is lost.

ALTER TABLE op_queue ADD COLUMN taken_by TEXT NOT NULL DEFAULT '';
