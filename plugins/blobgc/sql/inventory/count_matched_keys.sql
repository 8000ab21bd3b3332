-- (DuckDB) A part's report keys that some row forms (h % $parts = $part): accounted for without a live look-up.
SELECT count(*)
FROM (SELECT key FROM inventory WHERE h % CAST($parts AS UBIGINT) = CAST($part AS UBIGINT)) AS i
SEMI JOIN (SELECT key FROM accounted WHERE h % CAST($parts AS UBIGINT) = CAST($part AS UBIGINT)) AS a USING (key)
