-- The first blob id of the next key range: the id `range_size` rows after `lo` (NULL when the table ends first).
SELECT id
FROM app.blob
WHERE id >= %(lo)s
ORDER BY id
OFFSET %(range_size)s
LIMIT 1
