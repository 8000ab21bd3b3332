-- Release a stripe lock held for the session.
SELECT CASE WHEN %(exclusive)s THEN pg_advisory_unlock(%(lock_class)s, %(stripe)s)
            ELSE pg_advisory_unlock_shared(%(lock_class)s, %(stripe)s) END
