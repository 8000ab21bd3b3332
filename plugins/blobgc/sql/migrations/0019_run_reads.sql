-- Which connection each step of a run read its candidates from (the primary, or the optional read replica
-- `blobgc_postgres_replica`), and the replica's lag when the run's first step read from it: the receipt and the run
-- details say both. `reads` maps a task id to {"connection", "lag_seconds", "standby"}.
ALTER TABLE blobgc.run ADD COLUMN IF NOT EXISTS reads jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE blobgc.run ADD COLUMN IF NOT EXISTS replica_lag_seconds double precision;
