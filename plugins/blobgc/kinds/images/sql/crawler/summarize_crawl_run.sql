-- A crawler run's items per outcome, with a sample of failures.
SELECT coalesce(outcome, 'unfinished'), count(*), (array_agg(url || ': ' || error) FILTER (WHERE error IS NOT NULL))[1:5]
FROM blobgc.crawl_item
WHERE run_id = %(run_id)s
GROUP BY 1
ORDER BY 1
