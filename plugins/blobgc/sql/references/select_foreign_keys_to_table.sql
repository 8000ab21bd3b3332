-- Every foreign key, in any schema, that references the given table (partitions count once, via their parent): its
-- referencing and referenced columns in key order, whether an index leads with its columns, whether this role may read
-- the referencing table, and its ON DELETE action.
SELECT con.oid::bigint AS constraint_oid,
       n.nspname AS schema_name,
       c.relname AS table_name,
       ARRAY(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY AS k(attnum, i)
             LEFT JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum ORDER BY k.i) AS columns,
       ARRAY(SELECT a.attname::text FROM unnest(con.confkey) WITH ORDINALITY AS k(attnum, i)
             LEFT JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.attnum ORDER BY k.i) AS targets,
       con.conname AS constraint_name,
       EXISTS (
           SELECT 1 FROM pg_index i
           WHERE i.indrelid = con.conrelid
             AND (i.indkey::int2[])[0:cardinality(con.conkey) - 1] @> con.conkey
             AND (i.indkey::int2[])[0:cardinality(con.conkey) - 1] <@ con.conkey
       ) AS indexed,
       has_table_privilege(c.oid, 'SELECT') AS readable,
       CASE con.confdeltype WHEN 'a' THEN 'no action' WHEN 'r' THEN 'restrict' WHEN 'c' THEN 'cascade'
                            WHEN 'n' THEN 'set null' WHEN 'd' THEN 'set default' END AS on_delete
FROM pg_constraint con
JOIN pg_class c ON c.oid = con.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE con.contype = 'f'
  AND con.confrelid = %(target)s::regclass
  AND con.conparentid = 0
ORDER BY 2, 3, 6
