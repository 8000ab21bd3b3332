-- Count one DAG's cache keys still owed a purge, and the most attempts any purge has had.
SELECT coalesce(sum(cardinality(keys)), 0)::bigint, coalesce(max(attempts), 0)
FROM blobgc.cache_purge
WHERE dag_id = %(dag_id)s
