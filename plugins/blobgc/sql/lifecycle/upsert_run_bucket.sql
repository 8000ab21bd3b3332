-- What a run found of a bucket it deleted from (versioning, the noncurrent-version rule covering its keys), adding
-- the bytes its deletions left as noncurrent versions; in the transaction that settles them.
INSERT INTO blobgc.run_bucket AS b
    (dag_id, run_id, bucket, versioning, noncurrent_days, expired_markers, bytes_noncurrent, delete_markers)
VALUES (%(dag_id)s, %(run_id)s, %(bucket)s, %(versioning)s, %(noncurrent_days)s, %(expired_markers)s,
        %(bytes_noncurrent)s, %(delete_markers)s)
ON CONFLICT (dag_id, run_id, bucket) DO UPDATE
SET versioning = excluded.versioning,
    noncurrent_days = CASE WHEN b.bytes_noncurrent > 0 AND b.noncurrent_days IS NULL THEN NULL
                           WHEN excluded.noncurrent_days IS NULL THEN NULL
                           ELSE greatest(b.noncurrent_days, excluded.noncurrent_days) END,
    expired_markers = excluded.expired_markers,
    bytes_noncurrent = b.bytes_noncurrent + excluded.bytes_noncurrent,
    delete_markers = b.delete_markers + excluded.delete_markers,
    checked_at = now()
