-- A run's keys and bytes per prefix (the key's first path segment, `blobs/`), largest first (wrapped around receipts/select_run_keys).
SELECT split_part(k.key, '/', 1) || CASE WHEN strpos(k.key, '/') > 0 THEN '/' ELSE '' END AS prefix,
       count(*)::bigint AS objects,
       coalesce(sum(k.size_bytes), 0)::bigint AS bytes,
       count(*) FILTER (WHERE k.status = 'deleted')::bigint AS deleted,
       coalesce(sum(k.size_bytes) FILTER (WHERE k.status = 'deleted'), 0)::bigint AS deleted_bytes
FROM ({run_keys}) AS k
GROUP BY 1
ORDER BY bytes DESC, prefix
LIMIT %(limit)s
