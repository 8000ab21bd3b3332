-- What became of each key of the plan a run executes: planned = deleted + absent + kept + failed (+ not reached),
-- in keys and in the plan's own sizes (blobgc.plan_item.sizes; unknown sizes count 0), with the deleted keys' bytes
-- as the drain counted them, and all this run's drain deleted, whoever owed it (what blobgc.run counts).
-- Each planned key is matched to one key the run owed (the nth time a key is planned, to the nth time it was owed):
-- a planned key of an item the run dealt with but never owed was skipped at delete time (kept: its row referenced or
-- changed again); an owed key is deleted, absent or kept as the drain settled it, or failed while it is still owed.
-- A planned key of an item the run has not dealt with (the gate refused the plan, or the run has not got that far)
-- is not reached. Keys the run owed that its plan does not hold are counted apart (outside_keys: never expected).
WITH planned AS (
    SELECT p.bucket, k.key, k.size, po.item_id IS NOT NULL AS dealt_with,
           row_number() OVER (PARTITION BY p.bucket, k.key ORDER BY p.id, k.n) AS nth
    FROM blobgc.plan_item p
    LEFT JOIN blobgc.plan_outcome po ON po.dag_id = %(dag_id)s AND po.run_id = %(run_id)s AND po.item_id = p.id
    CROSS JOIN LATERAL unnest(p.keys, p.sizes) WITH ORDINALITY AS k(key, size, n)
    WHERE p.dag_id = %(dag_id)s AND p.run_id = %(plan_run_id)s
), owed AS (
    SELECT o.bucket, o.key, o.outcome, o.size, o.settled_by,
           row_number() OVER (PARTITION BY o.bucket, o.key ORDER BY o.log_id, o.outcome) AS nth
    FROM (
        SELECT l.id AS log_id, l.bucket, u.key, s.outcome, u.size, s.run_id AS settled_by
        FROM blobgc.deletion_log l
        JOIN blobgc.deletion_settlement s ON s.log_id = l.id
        CROSS JOIN LATERAL unnest(s.keys, s.sizes) AS u(key, size)
        WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND NOT l.dry_run AND u.key IS NOT NULL
        UNION ALL
        SELECT l.id, l.bucket, u.key, 'failed', NULL::bigint, NULL::text
        FROM blobgc.deletion_log l
        JOIN blobgc.outbox ob ON ob.log_id = l.id
        CROSS JOIN LATERAL unnest(coalesce(ob.keys, l.keys)) AS u(key)
        WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND NOT l.dry_run
    ) o
), matched AS (
    SELECT p.key IS NOT NULL AS in_plan, p.size AS planned_size,
           CASE WHEN o.key IS NOT NULL THEN o.outcome WHEN p.dealt_with THEN 'skipped' ELSE 'not_reached' END
               AS outcome,
           o.size AS counted_size, o.settled_by
    FROM planned p
    FULL JOIN owed o ON o.bucket = p.bucket AND o.key = p.key AND o.nth = p.nth
), plan_rows AS (  -- the plan's rows: deleted, skipped (referenced or changed again), or in items not dealt with
    SELECT coalesce(sum(cardinality(p.row_ids)), 0)::bigint AS planned,
           coalesce(sum(po.rows_deleted), 0)::bigint AS deleted,
           coalesce(sum(cardinality(po.skipped_ids)), 0)::bigint AS skipped,
           coalesce(sum(cardinality(p.row_ids)) FILTER (WHERE po.item_id IS NULL), 0)::bigint AS not_reached
    FROM blobgc.plan_item p
    LEFT JOIN blobgc.plan_outcome po ON po.dag_id = %(dag_id)s AND po.run_id = %(run_id)s AND po.item_id = p.id
    WHERE p.dag_id = %(dag_id)s AND p.run_id = %(plan_run_id)s
), drained AS (  -- everything this run's drain deleted, whoever owed it: what blobgc.run counts
    SELECT count(*)::bigint AS keys, coalesce(sum(u.size), 0)::bigint AS bytes
    FROM blobgc.deletion_settlement s
    JOIN blobgc.deletion_log l ON l.id = s.log_id
    CROSS JOIN LATERAL unnest(s.keys, s.sizes) AS u(key, size)
    WHERE s.run_id = %(run_id)s AND s.outcome = 'deleted' AND l.dag_id = %(dag_id)s AND u.key IS NOT NULL
)
SELECT count(*) FILTER (WHERE in_plan)::bigint AS planned_keys,
       coalesce(sum(planned_size) FILTER (WHERE in_plan), 0)::bigint AS planned_bytes,
       count(*) FILTER (WHERE in_plan AND planned_size IS NULL)::bigint AS unknown_size_keys,
       count(*) FILTER (WHERE in_plan AND outcome = 'deleted')::bigint AS deleted_keys,
       coalesce(sum(planned_size) FILTER (WHERE in_plan AND outcome = 'deleted'), 0)::bigint AS deleted_bytes,
       count(*) FILTER (WHERE in_plan AND outcome = 'absent')::bigint AS absent_keys,
       coalesce(sum(planned_size) FILTER (WHERE in_plan AND outcome = 'absent'), 0)::bigint AS absent_bytes,
       count(*) FILTER (WHERE in_plan AND outcome IN ('kept', 'skipped'))::bigint AS kept_keys,
       coalesce(sum(planned_size) FILTER (WHERE in_plan AND outcome IN ('kept', 'skipped')), 0)::bigint AS kept_bytes,
       count(*) FILTER (WHERE in_plan AND outcome = 'skipped')::bigint AS skipped_keys,
       count(*) FILTER (WHERE in_plan AND outcome = 'failed')::bigint AS failed_keys,
       coalesce(sum(planned_size) FILTER (WHERE in_plan AND outcome = 'failed'), 0)::bigint AS failed_bytes,
       count(*) FILTER (WHERE in_plan AND outcome = 'not_reached')::bigint AS not_reached_keys,
       coalesce(sum(planned_size) FILTER (WHERE in_plan AND outcome = 'not_reached'), 0)::bigint AS not_reached_bytes,
       coalesce(sum(counted_size) FILTER (WHERE in_plan AND outcome = 'deleted'), 0)::bigint AS deleted_counted_bytes,
       count(*) FILTER (WHERE in_plan AND outcome = 'deleted' AND settled_by = %(run_id)s)::bigint AS deleted_here_keys,
       coalesce(sum(counted_size) FILTER (WHERE in_plan AND outcome = 'deleted' AND settled_by = %(run_id)s), 0
                )::bigint AS deleted_here_bytes,
       count(*) FILTER (WHERE NOT in_plan)::bigint AS outside_keys,
       (SELECT planned FROM plan_rows) AS planned_rows,
       (SELECT deleted FROM plan_rows) AS deleted_rows,
       (SELECT skipped FROM plan_rows) AS skipped_rows,
       (SELECT not_reached FROM plan_rows) AS not_reached_rows,
       (SELECT keys FROM drained) AS drained_keys,
       (SELECT bytes FROM drained) AS drained_bytes
FROM matched
