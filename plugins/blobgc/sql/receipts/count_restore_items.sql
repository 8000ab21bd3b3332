-- What blobgc_restore runs did for one source run: items per restore run, kind and outcome.
SELECT restore_run_id, kind, outcome, count(*)::bigint AS items, max(at) AS last_at
FROM blobgc.restore_item
WHERE source_dag_id = %(dag_id)s AND source_run_id = %(run_id)s
GROUP BY restore_run_id, kind, outcome
ORDER BY max(at) DESC, kind, outcome;
