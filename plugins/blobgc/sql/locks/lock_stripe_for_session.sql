-- Hold one stripe lock for the session (across the transactions of a download or an upload): shared or alone.
SELECT CASE WHEN %(exclusive)s THEN pg_advisory_lock(%(lock_class)s, %(stripe)s)::text
            ELSE pg_advisory_lock_shared(%(lock_class)s, %(stripe)s)::text END
