-- Claim the next owed cache purges of one DAG, skipping rows another worker holds.
SELECT id, keys
FROM blobgc.cache_purge
WHERE dag_id = %(dag_id)s AND id > %(after)s
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
