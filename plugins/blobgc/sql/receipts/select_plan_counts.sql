-- A run's plan (rows, objects, bytes of the plan it executed), and what it skipped as referenced again since the
-- plan was made: rows and objects it passed over itself, and objects the drain's guard kept (a row claimed them).
SELECT (SELECT count(*) FROM blobgc.plan_item p
        WHERE p.dag_id = %(dag_id)s AND p.run_id = %(plan_run_id)s)::bigint AS items,
       (SELECT coalesce(sum(coalesce(cardinality(p.row_ids), 0)), 0) FROM blobgc.plan_item p
        WHERE p.dag_id = %(dag_id)s AND p.run_id = %(plan_run_id)s)::bigint AS planned_rows,
       (SELECT coalesce(sum(cardinality(p.keys)), 0) FROM blobgc.plan_item p
        WHERE p.dag_id = %(dag_id)s AND p.run_id = %(plan_run_id)s)::bigint AS planned_objects,
       (SELECT coalesce(sum(p.bytes), 0) FROM blobgc.plan_item p
        WHERE p.dag_id = %(dag_id)s AND p.run_id = %(plan_run_id)s)::bigint AS planned_bytes,
       (SELECT coalesce(sum(cardinality(o.skipped_ids)), 0) FROM blobgc.plan_outcome o
        WHERE o.dag_id = %(dag_id)s AND o.run_id = %(run_id)s)::bigint AS skipped_rows,
       ((SELECT coalesce(sum(cardinality(o.skipped_keys)), 0) FROM blobgc.plan_outcome o
         WHERE o.dag_id = %(dag_id)s AND o.run_id = %(run_id)s)
        + (SELECT coalesce(sum(cardinality(s.keys)), 0) FROM blobgc.deletion_settlement s
           JOIN blobgc.deletion_log l ON l.id = s.log_id
           WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND s.outcome = 'kept'))::bigint AS skipped_objects;
