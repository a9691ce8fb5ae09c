-- 0006 is reserved for the API keys migration of the auth branch, which
-- lands separately; the migration loader accepts no gap in versions, so
-- this branch holds the number with a no-op. Drop this file when merging
-- (two 0006 files make the loader refuse to start, so it cannot be missed).
SELECT 1;
