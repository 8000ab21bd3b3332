-- The collections with reclaim figures since a day: what the reclaim page can be filtered by.
SELECT DISTINCT collection FROM blobgc.reclaim_daily_by_collection WHERE day >= %(since)s
  AND (%(dag_ids)s::text[] IS NULL OR dag_id = ANY(%(dag_ids)s::text[]))
ORDER BY collection;
