-- Put back logged row images into a collection's table, as they were; a row whose id (or any unique value) exists
-- again is left alone. Returns the ids put back.
INSERT INTO {table}
SELECT (jsonb_populate_record(NULL::{table}, x.image)).*
FROM jsonb_array_elements(%(images)s::jsonb) AS x(image)
ON CONFLICT DO NOTHING
RETURNING {id}::text
