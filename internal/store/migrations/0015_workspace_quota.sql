-- 0015: a workspace's own size quota in bytes, given when it is created;
-- 0 (every workspace before this): the worker's HELMR_WORKSPACE_QUOTA.

ALTER TABLE workspaces ADD COLUMN quota_bytes BIGINT NOT NULL DEFAULT 0;
