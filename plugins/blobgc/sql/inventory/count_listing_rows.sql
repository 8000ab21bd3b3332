-- (DuckDB) A GCS or Azure report's rows: all of them, those without a key, and those of a bucket not $source_bucket.
SELECT count(*),
       count(*) FILTER (key IS NULL OR key = ''),
       count(*) FILTER (bucket IS NOT NULL AND bucket <> $source_bucket)
FROM inventory_files
