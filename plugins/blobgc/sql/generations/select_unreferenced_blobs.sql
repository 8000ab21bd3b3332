-- A dry run's view of delete_unreferenced_blobs: the blobs that would go, and the deletions that would be cleared.
SELECT coalesce((SELECT array_agg(blob_id ORDER BY blob_id) FROM gen.blob
                 WHERE blob_id = ANY(%(blob_ids)b::text[]) AND generation + 0 = %(generation)s), '{}'),
       coalesce((SELECT array_agg(size_bytes ORDER BY blob_id) FROM gen.blob
                 WHERE blob_id = ANY(%(blob_ids)b::text[]) AND generation + 0 = %(generation)s), '{}'),
       (SELECT count(*) FROM gen.deletion d
        WHERE d.generation = %(generation)s AND d.blob_id = ANY(%(blob_ids)b::text[])
          AND NOT EXISTS (SELECT 1 FROM gen.blob b WHERE b.blob_id = d.blob_id AND b.generation <> %(generation)s))
