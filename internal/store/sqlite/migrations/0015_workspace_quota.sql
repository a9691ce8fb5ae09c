-- 0015: a workspace's own size quota in bytes, given when it is created;
-- 0 (every workspace before this): the worker's HELMR_WORKSPACE_QUOTA.
-- Keep in step with postgres/migrations/0015_workspace_quota.sql.

ALTER TABLE workspaces ADD COLUMN quota_bytes BIGINT NOT NULL DEFAULT 0;
