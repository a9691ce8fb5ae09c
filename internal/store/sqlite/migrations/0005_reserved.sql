-- 0005 is reserved for a migration being written on another branch. The
-- migration loader refuses gaps in version numbers, so this placeholder
-- keeps 0006 loadable until then. When the real 0005 merges, delete this
-- file (two version-5 files stop every store from opening, so the merge
-- cannot miss it). A database migrated with this placeholder records
-- version 5 as applied and would skip the real 0005: only throwaway
-- databases of this branch should exist.
SELECT 1;
