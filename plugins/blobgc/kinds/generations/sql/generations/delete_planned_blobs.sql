-- Execute one plan item, re-checking it exactly: delete its blobs of the generation that no reference points at
-- now (the plan's bloom filter is not trusted here), with their deletions of the generation, and clear the
-- deletions of its row-less blob ids that still have no row. Nothing outside the item is touched.
-- `generation + 0` keeps the planner on the primary key: on the generation's index it would walk
-- every blob of the generation to find this batch's (measured 16 ms a batch at 60k blobs, growing).
WITH gone AS (
    DELETE FROM gen.blob b
    WHERE b.blob_id = ANY(%(blob_ids)b::text[]) AND b.generation + 0 = %(generation)s
      AND NOT EXISTS (SELECT 1 FROM gen.reference r WHERE r.blob_id = b.blob_id)
    RETURNING b.blob_id, b.size_bytes
), rowless AS (
    SELECT id FROM unnest(%(rowless_ids)b::text[]) AS id
    WHERE NOT EXISTS (SELECT 1 FROM gen.blob b WHERE b.blob_id = id)
), cleared AS (
    DELETE FROM gen.deletion
    WHERE generation = %(generation)s
      AND blob_id IN (SELECT blob_id FROM gone UNION ALL SELECT id FROM rowless)
    RETURNING 1
)
SELECT coalesce((SELECT array_agg(blob_id ORDER BY blob_id) FROM gone), '{}'),
       coalesce((SELECT array_agg(size_bytes ORDER BY blob_id) FROM gone), '{}'),
       coalesce((SELECT array_agg(id ORDER BY id) FROM rowless), '{}'),
       (SELECT count(*) FROM cleared)
