-- What one batch of blob ids the reference filter has never seen would collect: those with a row in the generation
-- (and their sizes), those with no row at all (stale deletions), and how many of the generation's deletions go
-- with them. A blob id of another generation is neither. `generation + 0`: see delete_planned_blobs.
WITH found AS (
    SELECT blob_id, size_bytes FROM gen.blob
    WHERE blob_id = ANY(%(blob_ids)b::text[]) AND generation + 0 = %(generation)s
), rowless AS (
    SELECT id FROM unnest(%(blob_ids)b::text[]) AS id
    WHERE NOT EXISTS (SELECT 1 FROM gen.blob b WHERE b.blob_id = id)
)
SELECT coalesce((SELECT array_agg(blob_id ORDER BY blob_id) FROM found), '{}'),
       coalesce((SELECT array_agg(size_bytes ORDER BY blob_id) FROM found), '{}'),
       coalesce((SELECT array_agg(id ORDER BY id) FROM rowless), '{}'),
       (SELECT count(*) FROM gen.deletion d
        WHERE d.generation = %(generation)s
          AND d.blob_id IN (SELECT blob_id FROM found UNION ALL SELECT id FROM rowless))
