-- (DuckDB) The leaf columns of the Parquet data file at $path, to check them against the manifest's fileSchema.
SELECT name FROM parquet_schema($path) WHERE num_children IS NULL OR num_children = 0
