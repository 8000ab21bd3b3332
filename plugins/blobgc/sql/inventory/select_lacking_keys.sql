-- (DuckDB) A part's keys after $after that rows must have and the report lacks, in key order (h % $parts = $part).
SELECT a.key
FROM (
    SELECT key FROM accounted
    WHERE required AND h % CAST($parts AS UBIGINT) = CAST($part AS UBIGINT) AND key > $after
) AS a
ANTI JOIN (
    SELECT key FROM inventory WHERE h % CAST($parts AS UBIGINT) = CAST($part AS UBIGINT)
) AS i USING (key)
ORDER BY a.key
