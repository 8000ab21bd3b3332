-- A writer's hold on a generation until its transaction ends (shared: writers never wait on each
-- other); the collector takes the same lock exclusively, for its session, while it collects.
SELECT CASE WHEN %(exclusive)s THEN pg_advisory_lock(%(lock_class)s, %(generation)s)::text
            ELSE pg_advisory_xact_lock_shared(%(lock_class)s, %(generation)s)::text END
