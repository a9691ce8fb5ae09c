-- 0016: a run started as a replay of another (the console's Replay)
-- names that run; empty for every other run.

ALTER TABLE runs ADD COLUMN replay_of TEXT NOT NULL DEFAULT '';
