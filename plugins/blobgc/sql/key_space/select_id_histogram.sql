-- Planner statistics for a table: estimated rows and its id column's histogram (quantile bounds, as text), to cut
-- id ranges without scanning.
SELECT c.reltuples::bigint, s.histogram_bounds::text::text[]
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = %(column)s
WHERE c.oid = %(table)s::regclass
