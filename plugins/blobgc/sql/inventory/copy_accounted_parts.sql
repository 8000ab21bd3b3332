-- (DuckDB) Table accounted written once into Parquet part files by hash, $path/part=P/*.parquet (P = h % $parts).
COPY (SELECT key, required, h % CAST($parts AS UBIGINT) AS part FROM accounted)
TO $path (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (part), OVERWRITE_OR_IGNORE)
