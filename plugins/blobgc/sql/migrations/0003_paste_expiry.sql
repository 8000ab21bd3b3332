-- Seed 002's paste expiry: the owed Redis purges and "kept" settlements for the re-upload race.

-- Cache keys owed a purge: the short codes of one expired batch, inserted in the transaction that
-- deletes the pastes and removed once Redis has unlinked them. A Redis outage leaves them owed.
CREATE TABLE blobgc.cache_purge (
    id               bigserial PRIMARY KEY,
    dag_id           text NOT NULL,
    run_id           text NOT NULL,
    keys             text[] NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    last_error       text,
    last_attempt_at  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cache_purge_dag_idx ON blobgc.cache_purge (dag_id, id);

-- An owed key is settled either by deleting its object, or by keeping it because a new row needs
-- the same key again (a paste re-created with the same content before the deletion ran).
ALTER TABLE blobgc.deletion_settlement
    ADD COLUMN outcome text NOT NULL DEFAULT 'deleted' CHECK (outcome IN ('deleted', 'kept'));

CREATE OR REPLACE VIEW blobgc.deleted_object AS
SELECT l.id AS log_id, l.dag_id, l.run_id, l.dry_run, l.source, l.bucket, k.key, k.size_bytes, l.logged_at,
       s.settled_at AS deleted_at, s.run_id AS deleted_by_run_id,
       (o.log_id IS NOT NULL AND (o.keys IS NULL OR k.key = ANY (o.keys))) AS owed,
       kept.settled_at AS kept_at
FROM blobgc.deletion_log l
CROSS JOIN LATERAL unnest(l.keys, l.sizes) AS k(key, size_bytes)
LEFT JOIN blobgc.outbox o ON o.log_id = l.id
LEFT JOIN LATERAL (
    SELECT st.settled_at, st.run_id
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
