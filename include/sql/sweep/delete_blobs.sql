-- Delete claimed blobs that are still unused, returning each row's image for the deletion log (blobgc_restore); a reference makes ON DELETE RESTRICT fail the statement.
DELETE FROM app.blob AS b
WHERE b.id = ANY(%(ids)b::text[]) AND b.unused
RETURNING b.id, b.size_bytes, to_jsonb(b)::text
