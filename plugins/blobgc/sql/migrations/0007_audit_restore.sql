-- Audit and restore: delete-marker version ids of objects deleted from versioned buckets, row images of
-- deleted rows where the source can take them back, and what each blobgc_restore run did.

-- The version id of the delete marker each deleted key got, parallel to keys; NULL when the bucket was
-- not versioned at the time (there is then nothing to undo in S3).
ALTER TABLE blobgc.deletion_settlement ADD COLUMN version_ids text[];

-- The deleted rows themselves (a JSON array of to_jsonb(row)), for sources whose rows blobgc_restore
-- can put back (seed 000's app.blob); NULL for the others.
ALTER TABLE blobgc.deletion_log ADD COLUMN rows jsonb;

CREATE OR REPLACE VIEW blobgc.deleted_object AS
SELECT l.id AS log_id, l.dag_id, l.run_id, l.dry_run, l.source, l.bucket, k.key, k.size_bytes, l.logged_at,
       s.settled_at AS deleted_at, s.run_id AS deleted_by_run_id,
       (o.log_id IS NOT NULL AND (o.keys IS NULL OR k.key = ANY (o.keys))) AS owed,
       kept.settled_at AS kept_at,
       s.version_id
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
) kept ON true;

-- One row per object, row or owed deletion a blobgc_restore run dealt with, and how: a retry skips
-- what is already here, and the report counts it.
CREATE TABLE blobgc.restore_item (
    restore_run_id  text NOT NULL,
    source_dag_id   text NOT NULL,
    source_run_id   text NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('object', 'row', 'owed')),
    bucket          text NOT NULL DEFAULT '',
    item            text NOT NULL,
    version_id      text,
    outcome         text NOT NULL CHECK (outcome IN ('restored', 'already_restored', 'cancelled', 'not_restored')),
    detail          text,
    at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (restore_run_id, kind, bucket, item)
);
