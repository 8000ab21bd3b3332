-- Collections (CONTRACT §6): any table of blobs, declared in the collections file. blobgc adds nothing to a
-- user's table: a collection's mark state lives in blobgc.mark_<collection> (created by the mark, its id typed
-- like the collection's), and its reclaim figures here.

-- What a real run reclaimed per collection, counted in the transaction that did the work (as blobgc.run's
-- totals are). A dry run's figures per collection are its report parts (blobgc.run_part.collection).
CREATE TABLE blobgc.run_collection (
    dag_id           text NOT NULL,
    run_id           text NOT NULL,
    collection       text NOT NULL,
    rows_deleted     bigint NOT NULL DEFAULT 0,
    objects_deleted  bigint NOT NULL DEFAULT 0,
    bytes_reclaimed  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (dag_id, run_id, collection)
);
ALTER TABLE blobgc.run_part ADD COLUMN collection text;

-- blobgc.reclaim_daily (CONTRACT §5) with a row per collection: the same columns, plus `collection`.
CREATE VIEW blobgc.reclaim_daily_by_collection AS
WITH per_run AS (
    SELECT dag_id, run_id, collection, rows_deleted, objects_deleted, bytes_reclaimed
    FROM blobgc.run_collection
    UNION ALL
    SELECT dag_id, run_id, collection, sum(rows_deleted), sum(objects_deleted), sum(bytes_reclaimed)
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
       p.collection
FROM blobgc.run r
JOIN per_run p ON p.dag_id = r.dag_id AND p.run_id = r.run_id
GROUP BY 1, 2, 3, p.collection;
