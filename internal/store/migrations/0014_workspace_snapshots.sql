-- 0014: a workspace's latest snapshot, a sealed copy of its files in the
-- blob store under snapshot_blob: its number (0: none yet; each one the
-- last plus one), sealed size and time. A workspace whose host is gone
-- moves to another worker, which restores it from there.

ALTER TABLE workspaces ADD COLUMN snapshot_seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workspaces ADD COLUMN snapshot_blob TEXT NOT NULL DEFAULT '';
ALTER TABLE workspaces ADD COLUMN snapshot_size BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workspaces ADD COLUMN snapshot_at {{.Time}};
