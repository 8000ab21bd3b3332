-- Delete claimed blobs that are still unused and that no reference of any kind points at (re-checked here, in the
-- deleting statement, whatever each foreign key's ON DELETE action), returning each row's size, the keys its templates form, and its image for the deletion log.
DELETE FROM app.blob AS b
WHERE b.id = ANY(%(ids)b::text[]) AND b.unused AND {unreferenced}
RETURNING b.id, b.size_bytes, {keys}, to_jsonb(b)::text
