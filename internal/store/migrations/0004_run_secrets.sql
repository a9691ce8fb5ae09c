-- 0004: a run's secret bindings (declared name → source, e.g. "vault:NAME")
-- as a JSON object. Values are never stored with the run.

ALTER TABLE runs ADD COLUMN secrets TEXT NOT NULL DEFAULT '{}';
