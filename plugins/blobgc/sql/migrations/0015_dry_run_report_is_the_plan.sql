-- A dry run's report is its plan (issue 31): the plan store keeps it once, in blobgc.plan_item, and the keys a dry
-- run would delete are no longer logged a second time in blobgc.deletion_log. blobgc.deleted_object shows them
-- from the plan (log_id NULL, dry_run true, logged_at the time they were planned), as it showed the log before.
-- The second records of dry runs already planned go; a dry run from before plans keeps its log rows (it has no
-- plan), and the view shows those as before.
DELETE FROM blobgc.deletion_log l
WHERE l.dry_run
  AND EXISTS (SELECT 1 FROM blobgc.plan_item p WHERE p.dag_id = l.dag_id AND p.run_id = l.run_id);

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
) absent ON true
UNION ALL
SELECT NULL::bigint AS log_id, p.dag_id, p.run_id, true AS dry_run, p.source, p.bucket, k.key, k.size_bytes,
       p.planned_at AS logged_at, NULL::timestamptz AS deleted_at, NULL::text AS deleted_by_run_id, false AS owed,
       NULL::timestamptz AS kept_at, NULL::text AS version_id, NULL::timestamptz AS absent_at, false AS parked
FROM blobgc.plan_item p
JOIN blobgc.run r ON r.dag_id = p.dag_id AND r.run_id = p.run_id AND r.dry_run
CROSS JOIN LATERAL unnest(p.keys, p.sizes) AS k(key, size_bytes);
