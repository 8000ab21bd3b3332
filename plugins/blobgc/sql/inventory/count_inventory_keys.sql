-- (DuckDB) The keys of table inventory: the report's current objects.
SELECT count(*) FROM inventory
