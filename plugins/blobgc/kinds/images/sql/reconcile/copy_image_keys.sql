-- The files an image was stored with, where known (each must exist), for the inventory anti-join. Other files
-- of an image id with a row are accounted for too: the anti-join leaves them to the per-key check.
SELECT k, true
FROM (SELECT DISTINCT image_id FROM app.image) i
JOIN blobgc.image_file f USING (image_id)
CROSS JOIN LATERAL unnest(f.keys) AS k
