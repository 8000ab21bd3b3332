-- One opener at a time: a retried or concurrent open_generation waits, then finds its run's generation.
SELECT pg_advisory_xact_lock(%(lock_class)s, 0)
