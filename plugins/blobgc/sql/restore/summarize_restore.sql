-- What one restore run did: per kind, outcome and reason, how many items.
SELECT kind, outcome, detail, count(*)::bigint
FROM blobgc.restore_item
WHERE restore_run_id = %(restore_run_id)s
GROUP BY kind, outcome, detail
ORDER BY kind, outcome;
