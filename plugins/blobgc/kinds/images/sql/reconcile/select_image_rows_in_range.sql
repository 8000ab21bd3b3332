-- Image ids in a shard's range [lo, hi), with the files they were stored with where known.
SELECT i.image_id, f.keys
FROM (SELECT DISTINCT image_id FROM app.image
      WHERE image_id >= %(shard_lo)s AND image_id < %(shard_hi)s AND image_id >= coalesce(%(lo)s::text, '')
  AND (%(hi)s::text IS NULL OR image_id < %(hi)s)) i
LEFT JOIN blobgc.image_file f USING (image_id)
ORDER BY i.image_id
