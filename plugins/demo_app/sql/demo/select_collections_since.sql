-- What the demo's real runs deleted and reclaimed per collection (blobgc.reclaim_daily_by_collection).
SELECT collection, sum(rows_deleted)::bigint, sum(objects_deleted)::bigint, sum(bytes_deleted)::bigint,
       sum(bytes_reclaimed)::bigint
FROM blobgc.reclaim_daily_by_collection
WHERE NOT dry_run AND day >= (%(since)s AT TIME ZONE 'UTC')::date
GROUP BY collection
ORDER BY collection
