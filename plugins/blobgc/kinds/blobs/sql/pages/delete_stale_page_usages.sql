-- Remove one batch of page usages not confirmed since the cutoff (seed 000's SweepPages), returning their blobs.
DELETE FROM app.page_using_blob p
USING (
    SELECT blob_id, url
    FROM app.page_using_blob
    WHERE updated_at < %(cutoff)s
    ORDER BY updated_at
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
) stale
WHERE p.blob_id = stale.blob_id AND p.url = stale.url
RETURNING p.blob_id
