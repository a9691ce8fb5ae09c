-- 0005: deploy-time builds. A build run (kind 'build') builds a
-- deployment's images on a worker; the deployment names it, and its state
-- (BUILDING, READY, FAILED) and image digests are read from that run, so
-- there is one source of truth. Runs may need worker digests (the base
-- image their image was built on at deploy) and name the image digest the
-- worker must reproduce, and the digest its base resolved to.

ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'task';
ALTER TABLE runs ADD COLUMN need_digests TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN need_image TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN need_base_digest TEXT NOT NULL DEFAULT '';
ALTER TABLE deployments ADD COLUMN build_run_id TEXT NOT NULL DEFAULT '';

DROP INDEX runs_project_env_created;
CREATE INDEX runs_project_env_created ON runs (project, env, kind, created_at DESC, id DESC);
