-- Remember the files a new image id was stored with, and their sizes.
INSERT INTO blobgc.image_file (image_id, keys, sizes) VALUES (%(image_id)s, %(keys)s::text[], %(sizes)s::bigint[])
ON CONFLICT (image_id) DO NOTHING
