-- Count one DAG's owed object deletions, their known bytes, the most attempts any has had, and how many are parked.
SELECT coalesce(sum(cardinality(coalesce(o.keys, l.keys))), 0)::bigint,
       coalesce(sum((SELECT sum(s) FROM unnest(coalesce(o.sizes, l.sizes)) s)), 0)::bigint,
       coalesce(max(o.attempts), 0),
       coalesce(sum(cardinality(coalesce(o.keys, l.keys))) FILTER (WHERE o.parked_at IS NOT NULL), 0)::bigint
FROM blobgc.outbox o
JOIN blobgc.deletion_log l ON l.id = o.log_id
WHERE o.dag_id = %(dag_id)s
