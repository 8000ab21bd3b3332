-- Take the file records of image ids left with no row. A record is taken once: of two runs whose plans both hold
-- an image id, only the one that takes its record (or deleted one of its rows) owes its files.
DELETE FROM blobgc.image_file WHERE image_id = ANY(%(image_ids)s::text[])
RETURNING image_id
