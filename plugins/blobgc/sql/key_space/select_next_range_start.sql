-- The first id of the next range: the id `range_size` rows after `lo` (NULL when the table ends first).
SELECT {id}::text
FROM {table}
WHERE {id} >= %(lo)s::{type}
ORDER BY {id}
OFFSET %(range_size)s
LIMIT 1
