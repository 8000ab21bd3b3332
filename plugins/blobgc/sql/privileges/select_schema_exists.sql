-- Whether a schema of this name exists (whatever this role may do in it).
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %(schema)s)
