-- Every key of one run, in log order: a real run's logged keys and what became of each (deleted, owed, kept, absent), a dry run's plan (or, for a dry run from before plans, its dry deletion log) as planned. A deleted key's size is the one its drain counted (the logged size, else the store's), so a key logged without a size still has one.
WITH the_run AS (
    SELECT r.dry_run FROM blobgc.run r WHERE r.dag_id = %(dag_id)s AND r.run_id = %(run_id)s
), has_plan AS (
    SELECT EXISTS (SELECT 1 FROM blobgc.plan_item p WHERE p.dag_id = %(dag_id)s AND p.run_id = %(run_id)s) AS yes
)
SELECT l.bucket, k.key, coalesce((s.map -> k.key ->> 3)::bigint, k.size_bytes) AS size_bytes,
       CASE WHEN s.map -> k.key ->> 0 = 'deleted' THEN 'deleted'
            WHEN o.log_id IS NOT NULL AND (o.keys IS NULL OR k.key = ANY (o.keys)) THEN 'owed'
            WHEN s.map ? k.key THEN s.map -> k.key ->> 0
            ELSE 'unsettled' END AS status,
       CASE WHEN s.map -> k.key ->> 0 = 'deleted' THEN (s.map -> k.key ->> 1)::timestamptz END AS deleted_at,
       CASE WHEN s.map -> k.key ->> 0 = 'deleted' THEN s.map -> k.key ->> 2 END AS version_id
FROM blobgc.deletion_log l
LEFT JOIN blobgc.outbox o ON o.log_id = l.id
-- Per log row (at most a batch of keys), its settlements as one map key -> [outcome, settled_at, version_id, size]:
-- the first deletion wins, else the first other outcome. A lookup per key, whatever the planner estimates.
CROSS JOIN LATERAL (
    SELECT jsonb_object_agg(u.key, jsonb_build_array(st.outcome, st.settled_at, u.version_id, u.size_bytes)
                            ORDER BY st.outcome = 'deleted', st.settled_at DESC) AS map
    FROM blobgc.deletion_settlement st
    CROSS JOIN LATERAL unnest(st.keys, st.version_ids, st.sizes) AS u(key, version_id, size_bytes)
    WHERE st.log_id = l.id
) s
CROSS JOIN LATERAL unnest(l.keys, l.sizes) AS k(key, size_bytes)
WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND NOT l.dry_run AND NOT (SELECT dry_run FROM the_run)
UNION ALL
SELECT p.bucket, k.key, k.size_bytes, 'planned', NULL::timestamptz, NULL::text
FROM blobgc.plan_item p
CROSS JOIN LATERAL unnest(p.keys, p.sizes) AS k(key, size_bytes)
WHERE p.dag_id = %(dag_id)s AND p.run_id = %(run_id)s AND (SELECT dry_run FROM the_run) AND (SELECT yes FROM has_plan)
UNION ALL
SELECT l.bucket, k.key, k.size_bytes, 'planned', NULL::timestamptz, NULL::text
FROM blobgc.deletion_log l
CROSS JOIN LATERAL unnest(l.keys, l.sizes) AS k(key, size_bytes)
WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND l.dry_run
  AND (SELECT dry_run FROM the_run) AND NOT (SELECT yes FROM has_plan)
