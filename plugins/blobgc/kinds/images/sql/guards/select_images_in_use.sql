-- The image ids, among the given ones, that still have a row (bound or not): their files are in use.
SELECT DISTINCT image_id FROM app.image WHERE image_id = ANY(%(image_ids)s::text[])
