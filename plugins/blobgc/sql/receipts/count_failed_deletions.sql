-- A real run's deletions not confirmed by S3: still owed in the outbox, and of those the parked ones.
SELECT coalesce(sum(cardinality(coalesce(o.keys, l.keys))), 0)::bigint AS owed,
       coalesce(sum(cardinality(coalesce(o.keys, l.keys))) FILTER (WHERE o.parked_at IS NOT NULL), 0)::bigint AS parked
FROM blobgc.deletion_log l
JOIN blobgc.outbox o ON o.log_id = l.id
WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND NOT l.dry_run;
