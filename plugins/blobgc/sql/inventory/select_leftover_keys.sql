-- (DuckDB) A part's report keys after $after that no row forms, in key order (table differences).
SELECT key, size, modified_ms FROM differences WHERE in_report AND key > $after ORDER BY key
