-- For each blob of one key range: does its `unused` flag flip (referenced now vs not), does its
-- `visibility` flip (PUBLIC exactly when an in-use page usage remains)? The referenced-ids query is composed
-- from the discovered foreign keys (blobgc.references); each IN becomes one hashed subplan.
SELECT c.id,
       c.unused,
       c.unused = (c.id IN ({referenced})) AS flip_unused,
       (c.visibility = 'PUBLIC') <> (c.id IN (
           SELECT p.blob_id FROM app.page_using_blob p
           WHERE p.in_use AND (%(lo)s::text IS NULL OR p.blob_id >= %(lo)s) AND (%(hi)s::text IS NULL OR p.blob_id < %(hi)s)
       )) AS flip_visibility
FROM app.blob c
WHERE (%(lo)s::text IS NULL OR c.id >= %(lo)s) AND (%(hi)s::text IS NULL OR c.id < %(hi)s)
