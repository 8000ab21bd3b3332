-- Release the collector's session lock on a generation.
SELECT pg_advisory_unlock(%(lock_class)s, %(generation)s)
