-- A run's objects in quarantine among some keys of one bucket, locked while a restore copies them back (a purge skips
-- them meanwhile): their quarantine keys, sizes and ETags, and when they were purged or restored, if they were.
SELECT key, quarantine_key, size_bytes, etag, days, purged_at, restored_at, id
FROM blobgc.quarantine
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s AND bucket = %(bucket)s AND key = ANY(%(keys)s::text[])
ORDER BY key, id DESC
FOR UPDATE
