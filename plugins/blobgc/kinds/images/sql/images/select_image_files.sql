-- The files (and sizes) the given image ids were stored with, where known.
SELECT image_id, keys, sizes FROM blobgc.image_file WHERE image_id = ANY(%(image_ids)s::text[])
