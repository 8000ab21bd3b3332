-- Forget the files of image ids whose deletion is now owed; returns what they were, for the deletion log.
DELETE FROM blobgc.image_file WHERE image_id = ANY(%(image_ids)s::text[])
RETURNING image_id, keys, sizes
