-- Every table with a foreign key to one of the given tables (schema and name, paired in order), found by name: no USAGE on their schemas is needed to ask. Partitions count once, through their parent.
SELECT t.schema, t.name, rn.nspname AS ref_schema, r.relname AS ref_table, con.conname AS constraint_name
FROM unnest(%(schemas)s::text[], %(names)s::text[]) AS t(schema, name)
JOIN pg_namespace tn ON tn.nspname = t.schema
JOIN pg_class tc ON tc.relnamespace = tn.oid AND tc.relname = t.name
JOIN pg_constraint con ON con.contype = 'f' AND con.confrelid = tc.oid AND con.conparentid = 0
JOIN pg_class r ON r.oid = con.conrelid
JOIN pg_namespace rn ON rn.oid = r.relnamespace
ORDER BY 1, 2, 3, 4, 5
