-- Set visibility in one key range: PUBLIC exactly when an in-use page usage remains, PRIVATE otherwise.
WITH visible AS MATERIALIZED (
    SELECT blob_id
    FROM app.page_using_blob
    WHERE in_use AND blob_id >= %(lo)s AND (%(hi)s::text IS NULL OR blob_id < %(hi)s)
)
UPDATE app.blob b
SET visibility = CASE WHEN b.visibility = 'PUBLIC' THEN 'PRIVATE' ELSE 'PUBLIC' END
WHERE b.id >= %(lo)s AND (%(hi)s::text IS NULL OR b.id < %(hi)s)
  AND (b.visibility = 'PUBLIC') <> (b.id IN (SELECT blob_id FROM visible))
RETURNING b.id
