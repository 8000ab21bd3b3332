-- Quarantine copies deleted for good (or found gone) by a purge.
UPDATE blobgc.quarantine
SET purged_at = now(), purged_by_run_id = %(run_id)s
WHERE id = ANY(%(ids)s::bigint[])
