-- (DuckDB) A part's report keys after $after that no row forms, in key order: the part is h % $parts = $part.
SELECT i.key, i.size, i.modified_ms
FROM (
    SELECT key, size, modified_ms FROM inventory
    WHERE h % CAST($parts AS UBIGINT) = CAST($part AS UBIGINT) AND key > $after
) AS i
ANTI JOIN (
    SELECT key FROM accounted WHERE h % CAST($parts AS UBIGINT) = CAST($part AS UBIGINT)
) AS a USING (key)
ORDER BY i.key
