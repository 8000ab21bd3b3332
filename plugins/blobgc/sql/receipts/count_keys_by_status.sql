-- A run's keys and bytes per status (deleted, owed, kept, absent, unsettled; planned for a dry run) (wrapped around receipts/select_run_keys).
SELECT k.status, count(*)::bigint AS objects, coalesce(sum(k.size_bytes), 0)::bigint AS bytes,
       count(k.version_id)::bigint AS with_version_id
FROM ({run_keys}) AS k
GROUP BY k.status
ORDER BY k.status
