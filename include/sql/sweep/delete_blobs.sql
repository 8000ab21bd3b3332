-- Delete claimed blobs that are still unused; a reference makes ON DELETE RESTRICT fail the statement.
DELETE FROM app.blob
WHERE id = ANY(%(ids)b::text[]) AND unused
RETURNING id, size_bytes
