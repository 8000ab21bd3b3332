-- Forget a run's earlier dry-run report for one source and part before it is written again (a retried dry run).
DELETE FROM blobgc.deletion_log
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s AND dry_run AND source = %(source)s AND part = %(part)s
