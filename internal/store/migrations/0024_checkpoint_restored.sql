-- 0024: when a parked run's checkpoint was restored (NULL while the run is
-- parked on it). A restored checkpoint is kept until the run ends or
-- parks again: a run whose worker is lost after the restore is retried
-- from it, with the memory it had when it parked.

ALTER TABLE checkpoints ADD COLUMN restored_at {{.Time}};
