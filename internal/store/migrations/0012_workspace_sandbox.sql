-- 0012: the named sandbox a workspace uses (sandbox("NAME") in the task
-- code): its direct operations run in that sandbox of the current
-- deployment, whichever task declares it. Empty for workspaces made
-- before this migration (they use their task's sandbox).

ALTER TABLE workspaces ADD COLUMN sandbox TEXT NOT NULL DEFAULT '';
