-- Is this server a standby, and how far behind its primary is it? The time since the last transaction it replayed,
-- or 0 while it has replayed everything it received (an idle primary writes nothing to replay). NULL on a primary.
SELECT pg_is_in_recovery() AS standby,
       CASE WHEN NOT pg_is_in_recovery() THEN NULL
            WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::double precision
       END AS lag_seconds
