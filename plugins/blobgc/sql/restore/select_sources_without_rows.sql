-- Per source, the log rows of a run that hold no row images (their rows cannot be put back), and their objects.
SELECT l.source, count(*)::bigint AS log_rows, sum(cardinality(l.keys))::bigint AS objects
FROM blobgc.deletion_log l
WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND NOT l.dry_run AND l.rows IS NULL
  AND (%(sources)s::text[] IS NULL OR l.source = ANY(%(sources)s::text[]))
GROUP BY l.source
ORDER BY l.source;
