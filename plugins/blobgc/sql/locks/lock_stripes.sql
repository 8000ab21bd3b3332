-- Take, until the transaction ends, the stripe locks of one class that writers share and deleters hold alone (in order, so no deadlock).
SELECT CASE WHEN %(exclusive)s THEN pg_advisory_xact_lock(%(lock_class)s, s)::text
            ELSE pg_advisory_xact_lock_shared(%(lock_class)s, s)::text END
FROM unnest(%(stripes)s::integer[]) AS s
ORDER BY s
