-- Hold a generation exclusively until the transaction ends (the outbox's guard for mail objects): writers of it wait.
SELECT pg_advisory_xact_lock(%(lock_class)s, %(generation)s)::text
