-- Safety review (issue 15): dry-run reports per task part, owed deletions that are parked instead of
-- wedging a drain, keys found absent at drain time, and restores that verify.

-- A dry run's report is written per part of the run (a sweep's id range, a media shard, the page usages):
-- a retried task first takes its part's report back, so it never counts twice. Real runs count in the
-- transaction that does the work and need no parts.
CREATE TABLE blobgc.run_part (
    dag_id           text NOT NULL,
    run_id           text NOT NULL,
    part             text NOT NULL,
    rows_deleted     bigint NOT NULL DEFAULT 0,
    objects_deleted  bigint NOT NULL DEFAULT 0,
    bytes_reclaimed  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (dag_id, run_id, part)
);
ALTER TABLE blobgc.deletion_log ADD COLUMN part text NOT NULL DEFAULT '';

-- Owed deletions that keep failing for a reason a retry cannot fix (NoSuchBucket, AccessDenied) are
-- tried again with backoff and parked after a few attempts, so the rest of the outbox drains. A parked
-- row stays owed (nothing is forgotten) until an operator unparks it.
ALTER TABLE blobgc.outbox
    ADD COLUMN failures         integer NOT NULL DEFAULT 0,
    ADD COLUMN next_attempt_at  timestamptz,
    ADD COLUMN parked_at        timestamptz;
CREATE INDEX outbox_parked_idx ON blobgc.outbox (dag_id) WHERE parked_at IS NOT NULL;

-- A key that did not exist when the drain looked (a thumbnail never made, an object already gone) is
-- settled as absent: not deleted, not counted, and no delete marker is left for it.
ALTER TABLE blobgc.deletion_settlement DROP CONSTRAINT deletion_settlement_outcome_check;
ALTER TABLE blobgc.deletion_settlement
    ADD CONSTRAINT deletion_settlement_outcome_check CHECK (outcome IN ('deleted', 'kept', 'absent'));

-- The byte counts the store reported for the deleted keys, parallel to keys (NULL: not reported).
ALTER TABLE blobgc.deletion_settlement ADD COLUMN sizes bigint[];

CREATE OR REPLACE VIEW blobgc.deleted_object AS
SELECT l.id AS log_id, l.dag_id, l.run_id, l.dry_run, l.source, l.bucket, k.key, k.size_bytes, l.logged_at,
       s.settled_at AS deleted_at, s.run_id AS deleted_by_run_id,
       (o.log_id IS NOT NULL AND (o.keys IS NULL OR k.key = ANY (o.keys))) AS owed,
       kept.settled_at AS kept_at,
       s.version_id,
       absent.settled_at AS absent_at,
       (o.log_id IS NOT NULL AND o.parked_at IS NOT NULL AND (o.keys IS NULL OR k.key = ANY (o.keys))) AS parked
FROM blobgc.deletion_log l
CROSS JOIN LATERAL unnest(l.keys, l.sizes) AS k(key, size_bytes)
LEFT JOIN blobgc.outbox o ON o.log_id = l.id
LEFT JOIN LATERAL (
    SELECT st.settled_at, st.run_id, st.version_ids[array_position(st.keys, k.key)] AS version_id
    FROM blobgc.deletion_settlement st
    WHERE st.log_id = l.id AND st.outcome = 'deleted' AND k.key = ANY (st.keys)
    ORDER BY st.settled_at
    LIMIT 1
) s ON true
LEFT JOIN LATERAL (
    SELECT st.settled_at
    FROM blobgc.deletion_settlement st
    WHERE st.log_id = l.id AND st.outcome = 'kept' AND k.key = ANY (st.keys)
    ORDER BY st.settled_at
    LIMIT 1
) kept ON true
LEFT JOIN LATERAL (
    SELECT st.settled_at
    FROM blobgc.deletion_settlement st
    WHERE st.log_id = l.id AND st.outcome = 'absent' AND k.key = ANY (st.keys)
    ORDER BY st.settled_at
    LIMIT 1
) absent ON true;

-- A restore that undid an object but found it still missing (HEAD) reports it as failed.
ALTER TABLE blobgc.restore_item DROP CONSTRAINT restore_item_outcome_check;
ALTER TABLE blobgc.restore_item ADD CONSTRAINT restore_item_outcome_check
    CHECK (outcome IN ('restored', 'already_restored', 'cancelled', 'not_restored', 'failed'));
