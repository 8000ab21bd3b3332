-- (DuckDB) The report's rows whose key does not URL-decode, whose size is no number, whose date is no timestamp.
SELECT count(*) FILTER (key IS NULL),
       count(*) FILTER (size IS NULL OR size < 0),
       count(*) FILTER (modified_ms IS NULL)
FROM inventory
