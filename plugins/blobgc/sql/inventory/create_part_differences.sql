-- (DuckDB) Table differences of one part, in one join: its report keys no row forms, and the formed keys it lacks.
CREATE OR REPLACE TABLE differences AS
SELECT coalesce(i.key, a.key) AS key, i.size, i.modified_ms, i.key IS NOT NULL AS in_report, a.required
FROM inventory AS i
FULL OUTER JOIN accounted AS a ON i.key = a.key
WHERE i.key IS NULL OR a.key IS NULL
