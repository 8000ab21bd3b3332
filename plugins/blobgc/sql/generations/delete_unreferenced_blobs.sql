-- Delete the generation's blobs the filter found no reference to, and clear their deletions (and the
-- deletions of blob ids that have no row at all). Deletions of a blob of another generation stay.
-- `generation + 0` keeps the planner on the primary key: on the generation's index it would walk
-- every blob of the generation to find this batch's (measured 16 ms a batch at 60k blobs, growing).
WITH gone AS (
    DELETE FROM gen.blob
    WHERE blob_id = ANY(%(blob_ids)b::text[]) AND generation + 0 = %(generation)s
    RETURNING blob_id, size_bytes
), rowless AS (
    SELECT id FROM unnest(%(blob_ids)b::text[]) AS id
    WHERE NOT EXISTS (SELECT 1 FROM gen.blob b WHERE b.blob_id = id)
), cleared AS (
    DELETE FROM gen.deletion
    WHERE generation = %(generation)s
      AND blob_id IN (SELECT blob_id FROM gone UNION ALL SELECT id FROM rowless)
    RETURNING 1
)
SELECT coalesce((SELECT array_agg(blob_id ORDER BY blob_id) FROM gone), '{}'),
       coalesce((SELECT array_agg(size_bytes ORDER BY blob_id) FROM gone), '{}'),
       (SELECT count(*) FROM cleared)
