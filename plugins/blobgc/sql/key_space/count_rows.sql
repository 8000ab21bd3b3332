-- The exact number of rows (when the planner has no estimate yet).
SELECT count(*) FROM {table}
