-- Of some quarantine keys in one bucket, those blobgc already records (a drain that finds such a copy must not count
-- it again).
SELECT quarantine_key
FROM blobgc.quarantine
WHERE bucket = %(bucket)s AND quarantine_key = ANY(%(targets)s::text[])
