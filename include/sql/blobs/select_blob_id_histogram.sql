-- Planner statistics for app.blob: estimated rows and the id histogram (quantile bounds), to cut key ranges without scanning.
SELECT c.reltuples::bigint, s.histogram_bounds::text::text[]
FROM pg_class c
LEFT JOIN pg_stats s ON s.schemaname = 'app' AND s.tablename = 'blob' AND s.attname = 'id'
WHERE c.oid = 'app.blob'::regclass
