-- (DuckDB) Table inventory written once into Parquet part files by hash, $path/part=P/*.parquet (P = h % $parts).
COPY (SELECT key, size, modified_ms, h % CAST($parts AS UBIGINT) AS part FROM inventory)
TO $path (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (part), OVERWRITE_OR_IGNORE)
