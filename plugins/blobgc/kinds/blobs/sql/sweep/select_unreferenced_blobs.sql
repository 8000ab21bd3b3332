-- A dry run's view of delete_blobs: which of the given unused blobs no reference of any kind points at, with their sizes.
SELECT b.id, b.size_bytes, {keys}
FROM app.blob AS b
WHERE b.id = ANY(%(ids)b::text[]) AND b.unused AND {unreferenced}
