-- Every live reference to a blob of the generation, whatever generation the reference row itself claims.
SELECT r.blob_id
FROM gen.reference r
JOIN gen.blob b ON b.blob_id = r.blob_id
WHERE b.generation = %(generation)s
