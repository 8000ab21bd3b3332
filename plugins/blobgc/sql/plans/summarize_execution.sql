-- What a run did with its plan: items dealt with, rows and objects skipped as referenced again since the plan,
-- the keys the drain kept for the same reason, and the keys still owed (failed so far).
SELECT count(*)::bigint AS items_done,
       coalesce(sum(cardinality(o.skipped_ids)), 0)::bigint AS rows_skipped,
       coalesce(sum(cardinality(o.skipped_keys)), 0)::bigint AS objects_skipped,
       (SELECT coalesce(sum(cardinality(s.keys)), 0) FROM blobgc.deletion_settlement s
        JOIN blobgc.deletion_log l ON l.id = s.log_id
        WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND s.outcome = 'kept')::bigint AS objects_kept,
       (SELECT coalesce(sum(coalesce(cardinality(ob.keys), cardinality(l.keys))), 0) FROM blobgc.outbox ob
        JOIN blobgc.deletion_log l ON l.id = ob.log_id
        WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s)::bigint AS objects_failed
FROM blobgc.plan_outcome o
WHERE o.dag_id = %(dag_id)s AND o.run_id = %(run_id)s
