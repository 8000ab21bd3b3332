-- Undo for every bucket, and honest reclaim figures (issue 32).
--
-- Quarantine: with N days of quarantine, the drain copies an owed object to
-- `.blobgc-quarantine/{dag_id}/{run_id}/{key}` in its own bucket, verifies the copy, then deletes the original. Each
-- such object is recorded here, with the run whose deletion put it there (the deletion log's run), until the DAG's
-- purge_quarantine task deletes the copy (purged_at) or an undo copies it back (restored_at).
CREATE TABLE blobgc.quarantine (
    id               bigserial PRIMARY KEY,
    dag_id           text NOT NULL,
    run_id           text NOT NULL,
    log_id           bigint REFERENCES blobgc.deletion_log (id),
    source           text NOT NULL,
    bucket           text NOT NULL,
    key              text NOT NULL,
    quarantine_key   text NOT NULL,
    size_bytes       bigint,
    etag             text,
    days             integer NOT NULL CHECK (days > 0),
    quarantined_at   timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    purged_at        timestamptz,
    purged_by_run_id text,
    restored_at      timestamptz,
    restored_by_run_id text,
    UNIQUE (bucket, quarantine_key)
);
CREATE INDEX quarantine_held_idx ON blobgc.quarantine (dag_id, bucket, expires_at)
    WHERE purged_at IS NULL AND restored_at IS NULL;
CREATE INDEX quarantine_run_idx ON blobgc.quarantine (dag_id, run_id);

-- Bytes deleted and bytes reclaimed are two amounts. A real run's bytes_reclaimed counts only bytes gone from storage:
-- an unversioned bucket's deletions, and quarantine copies purged. bytes_deleted counts every object the run took
-- out of its bucket's view: deleted, moved into quarantine, or left as a noncurrent version on a versioned bucket.
-- Runs before this migration did not tell them apart: their bytes_deleted is their bytes_reclaimed.
ALTER TABLE blobgc.run ADD COLUMN bytes_deleted bigint NOT NULL DEFAULT 0;
ALTER TABLE blobgc.run_collection ADD COLUMN bytes_deleted bigint NOT NULL DEFAULT 0;
UPDATE blobgc.run SET bytes_deleted = bytes_reclaimed WHERE NOT dry_run;
UPDATE blobgc.run_collection SET bytes_deleted = bytes_reclaimed;

-- What each run found of the buckets it deleted from: versioning, and the lifecycle rule that expires noncurrent
-- versions (NULL days: none). bytes_noncurrent: bytes the run's deletions left as noncurrent versions; delete_markers:
-- the delete markers they left, which become expired-object delete markers once those versions expire (a cleanup item:
-- removed only by a rule with ExpiredObjectDeleteMarker, expired_markers).
CREATE TABLE blobgc.run_bucket (
    dag_id            text NOT NULL,
    run_id            text NOT NULL,
    bucket            text NOT NULL,
    versioning        text NOT NULL,
    noncurrent_days   integer,
    expired_markers   boolean NOT NULL DEFAULT false,
    bytes_noncurrent  bigint NOT NULL DEFAULT 0,
    delete_markers    bigint NOT NULL DEFAULT 0,
    checked_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dag_id, run_id, bucket)
);

CREATE OR REPLACE VIEW blobgc.reclaim_daily AS
SELECT (r.started_at AT TIME ZONE 'UTC')::date AS day,
       r.dag_id,
       r.dry_run,
       count(*)::bigint                AS runs,
       sum(r.rows_deleted)::bigint     AS rows_deleted,
       sum(r.objects_deleted)::bigint  AS objects_deleted,
       sum(r.bytes_reclaimed)::bigint  AS bytes_reclaimed,
       sum(CASE WHEN r.dry_run THEN r.bytes_reclaimed ELSE r.bytes_deleted END)::bigint AS bytes_deleted,
       sum(coalesce(b.bytes_noncurrent, 0))::bigint AS bytes_noncurrent,
       CASE WHEN bool_and(b.freed_by IS NOT NULL OR b.bytes_noncurrent IS NULL)
            THEN max(b.freed_by) END   AS noncurrent_freed_by
FROM blobgc.run r
LEFT JOIN LATERAL (
    SELECT sum(rb.bytes_noncurrent) AS bytes_noncurrent,
           CASE WHEN bool_and(rb.noncurrent_days IS NOT NULL)
                THEN max(r.started_at + make_interval(days => rb.noncurrent_days + 1)) END AS freed_by
    FROM blobgc.run_bucket rb
    WHERE rb.dag_id = r.dag_id AND rb.run_id = r.run_id AND rb.bytes_noncurrent > 0
) b ON true
GROUP BY 1, 2, 3;

CREATE OR REPLACE VIEW blobgc.reclaim_daily_by_collection AS
WITH per_run AS (
    SELECT dag_id, run_id, collection, rows_deleted, objects_deleted, bytes_reclaimed, bytes_deleted
    FROM blobgc.run_collection
    UNION ALL
    SELECT dag_id, run_id, collection, sum(rows_deleted), sum(objects_deleted), sum(bytes_reclaimed),
           sum(bytes_reclaimed)
    FROM blobgc.run_part
    WHERE collection IS NOT NULL
    GROUP BY dag_id, run_id, collection
)
SELECT (r.started_at AT TIME ZONE 'UTC')::date AS day,
       r.dag_id,
       r.dry_run,
       count(DISTINCT r.run_id)::bigint  AS runs,
       sum(p.rows_deleted)::bigint       AS rows_deleted,
       sum(p.objects_deleted)::bigint    AS objects_deleted,
       sum(p.bytes_reclaimed)::bigint    AS bytes_reclaimed,
       p.collection,
       sum(p.bytes_deleted)::bigint      AS bytes_deleted
FROM blobgc.run r
JOIN per_run p ON p.dag_id = r.dag_id AND p.run_id = r.run_id
GROUP BY 1, 2, 3, p.collection;
