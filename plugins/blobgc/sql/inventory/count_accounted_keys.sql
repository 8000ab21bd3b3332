-- (DuckDB) The keys of table accounted: every key the rows form.
SELECT count(*) FROM accounted
