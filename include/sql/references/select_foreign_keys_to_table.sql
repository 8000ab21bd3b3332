-- Every single-column foreign key, in any schema, that references the given table (partitions count once, via their parent).
SELECT n.nspname AS schema_name,
       c.relname AS table_name,
       a.attname AS column_name,
       con.conname AS constraint_name,
       EXISTS (
           SELECT 1 FROM pg_index i
           WHERE i.indrelid = con.conrelid AND i.indkey[0] = con.conkey[1]
       ) AS indexed
FROM pg_constraint con
JOIN pg_class c ON c.oid = con.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = con.conkey[1]
WHERE con.contype = 'f'
  AND con.confrelid = %(target)s::regclass
  AND con.conparentid = 0
  AND cardinality(con.conkey) = 1
ORDER BY 1, 2, 3
