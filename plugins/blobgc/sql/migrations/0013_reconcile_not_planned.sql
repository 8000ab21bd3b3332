-- Reconcile's report of what it considered and did not plan (issue 30), per shard or inventory part: the collection
-- or bucket it counts under, the keys it judged, those a row accounts for, and when the first object found too young
-- for the age floor becomes eligible. Rows of runs before this migration have no scope and zero counts.
ALTER TABLE blobgc.reconcile_checkpoint
    ADD COLUMN scope             text,
    ADD COLUMN considered        bigint NOT NULL DEFAULT 0,
    ADD COLUMN accounted         bigint NOT NULL DEFAULT 0,
    ADD COLUMN first_eligible_at timestamptz;
