-- Record objects moved into quarantine (original key, quarantine key, size, ETag, window); in the transaction that
-- settles their owed keys. A copy recorded before (a retried settlement) is left as it is.
INSERT INTO blobgc.quarantine (dag_id, run_id, log_id, source, bucket, key, quarantine_key, size_bytes, etag, days,
                               expires_at)
SELECT %(dag_id)s, %(run_id)s, %(log_id)s, %(source)s, %(bucket)s, q.key, q.target, q.size, q.etag, q.days,
       now() + make_interval(days => q.days)
FROM unnest(%(keys)s::text[], %(targets)s::text[], %(sizes)s::bigint[], %(etags)s::text[], %(days)s::int[])
     AS q(key, target, size, etag, days)
ON CONFLICT (bucket, quarantine_key) DO NOTHING
