-- (DuckDB) The report's keys in one part (h % $parts = $part): the part's keys checked.
SELECT count(*) FROM inventory WHERE h % CAST($parts AS UBIGINT) = CAST($part AS UBIGINT)
