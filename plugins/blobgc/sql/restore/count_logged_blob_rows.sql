-- How many app.blob row images a run's log holds (what a dry-run restore would put back).
SELECT coalesce(sum(jsonb_array_length(l.rows)), 0)
FROM blobgc.deletion_log l
WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND NOT l.dry_run AND l.source = 'app.blob' AND l.rows IS NOT NULL;
