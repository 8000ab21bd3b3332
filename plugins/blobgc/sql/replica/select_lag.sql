-- Is this server a standby, is it streaming from its primary, and how far behind is it? The time since the last
-- transaction it replayed, or 0 while it has replayed everything it received (an idle primary writes nothing to
-- replay). NULL on a primary, and on a standby that is not streaming (archive recovery, a broken connection to its
-- primary) or has replayed nothing since it started: its lag is unknown.
WITH receiver AS (SELECT EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming') AS streaming)
SELECT pg_is_in_recovery() AS standby,
       CASE WHEN NOT pg_is_in_recovery() OR NOT receiver.streaming THEN NULL
            WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::double precision
       END AS lag_seconds
FROM receiver
