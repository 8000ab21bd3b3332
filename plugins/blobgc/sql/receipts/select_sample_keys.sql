-- The first keys of a run, for its receipt (wrapped around receipts/select_run_keys).
SELECT k.bucket, k.key, k.size_bytes, k.status, k.deleted_at, k.version_id
FROM ({run_keys}) AS k
LIMIT %(sample)s
