-- The tables, views and sequences of one schema (partitions left out: their parent stands for them), with their kind, by name: none if the schema does not exist.
SELECT c.relname, CASE WHEN c.relkind IN ('r', 'p') THEN 'table' WHEN c.relkind = 'S' THEN 'sequence' ELSE 'view' END
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p', 'v', 'm', 'S') AND NOT c.relispartition
ORDER BY c.relname
