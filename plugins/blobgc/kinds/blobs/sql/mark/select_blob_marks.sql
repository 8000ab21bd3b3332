-- For each blob of one key range: does its `unused` flag flip (referenced now vs not), does its `visibility` flip
-- (PUBLIC exactly when an in-use page usage remains)? NULL-safe: the referenced ids (composed from the discovered
-- foreign keys, blobgc.references) never include NULL and are matched by a join, never by `IN (subquery)`.
SELECT c.id,
       c.unused,
       c.unused = (r.blob_id IS NOT NULL) AS flip_unused,
       (c.visibility = 'PUBLIC') <> (p.blob_id IS NOT NULL) AS flip_visibility
FROM app.blob c
LEFT JOIN (SELECT DISTINCT x.blob_id FROM ({referenced}) AS x) AS r ON r.blob_id = c.id
LEFT JOIN (
    SELECT DISTINCT u.blob_id FROM app.page_using_blob u
    WHERE u.in_use AND (%(lo)s::text IS NULL OR u.blob_id >= %(lo)s) AND (%(hi)s::text IS NULL OR u.blob_id < %(hi)s)
) AS p ON p.blob_id = c.id
WHERE (%(lo)s::text IS NULL OR c.id >= %(lo)s) AND (%(hi)s::text IS NULL OR c.id < %(hi)s)
