-- (DuckDB) A part's keys after $after that rows must have and the report lacks, in key order (table differences).
SELECT key FROM differences WHERE NOT in_report AND required AND key > $after ORDER BY key
