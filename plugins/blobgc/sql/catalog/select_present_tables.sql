-- Which of the named tables (schema-qualified) this database has.
SELECT name FROM unnest(%(names)s::text[]) AS t(name) WHERE to_regclass(name) IS NOT NULL
