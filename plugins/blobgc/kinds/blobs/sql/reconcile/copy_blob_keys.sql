-- Every key a blob row accounts for (its raw upload, which must exist, and its optional thumbnail), for the
-- inventory anti-join: blobgc.kinds.blobs.layouts.blob_keys in SQL.
SELECT 'blobs/' || id || '/raw', true FROM app.blob
UNION ALL
SELECT 'blobs/' || id || '/thumbnail', false FROM app.blob
