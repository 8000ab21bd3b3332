-- A run's progress so far: the parts and items of the plan it executes done and left, the plan's rows and objects not
-- reached yet, the keys of its deletion log still owed, what it dealt with in the last `window` seconds, and when
-- it last did anything. Arrays are counted by their length, never unnested: cheap enough to ask every few seconds.
WITH run AS (
    SELECT r.dag_id, r.run_id, r.dry_run, r.started_at, r.finished_at, r.rows_deleted, r.objects_deleted,
           r.bytes_deleted, coalesce(r.plan_run_id, r.run_id) AS plan_run_id, now() AS as_of,
           now() - make_interval(secs => %(window)s) AS since
    FROM blobgc.run r
    WHERE r.dag_id = %(dag_id)s AND r.run_id = %(run_id)s
), item AS (  -- the plan's items, and what this run did with each (done_at: the start of the transaction that did it)
    SELECT p.collection, p.part, coalesce(cardinality(p.row_ids), 0) AS rows, cardinality(p.keys) AS keys,
           p.planned_at, o.item_id IS NOT NULL AS done, o.done_at, coalesce(o.rows_deleted, 0) AS rows_deleted
    FROM run
    JOIN blobgc.plan_item p ON p.dag_id = run.dag_id AND p.run_id = run.plan_run_id
    LEFT JOIN blobgc.plan_outcome o ON o.dag_id = run.dag_id AND o.run_id = run.run_id AND o.item_id = p.id
), part AS (
    SELECT bool_and(done) AS done FROM item GROUP BY collection, part
), items AS (
    SELECT count(*)::bigint AS items,
           count(*) FILTER (WHERE done)::bigint AS items_done,
           coalesce(sum(rows), 0)::bigint AS planned_rows,
           coalesce(sum(keys), 0)::bigint AS planned_objects,
           coalesce(sum(rows) FILTER (WHERE NOT done), 0)::bigint AS rows_not_reached,
           coalesce(sum(keys) FILTER (WHERE NOT done), 0)::bigint AS objects_not_reached,
           coalesce(sum(item.rows_deleted) FILTER (WHERE done_at > run.since), 0)::bigint AS rows_recent,
           min(done_at) AS first_done_at,
           greatest(max(planned_at), max(done_at)) AS last_item_at
    FROM item, run
), log AS (  -- what this run owed the drain
    SELECT l.id, cardinality(l.keys) AS keys, l.logged_at
    FROM run
    JOIN blobgc.deletion_log l ON l.dag_id = run.dag_id AND l.run_id = run.run_id AND NOT l.dry_run
), owed AS (  -- its keys still owed, parked ones apart (they wait for an operator)
    SELECT coalesce(sum(coalesce(cardinality(ob.keys), log.keys)) FILTER (WHERE ob.log_id IS NOT NULL), 0)::bigint
               AS objects,
           coalesce(sum(coalesce(cardinality(ob.keys), log.keys)) FILTER (WHERE ob.parked_at IS NOT NULL), 0)::bigint
               AS parked,
           max(log.logged_at) AS last_logged_at
    FROM log
    LEFT JOIN blobgc.outbox ob ON ob.log_id = log.id
), settled AS (  -- its keys the drain dealt with, whichever run's drain (settled_at: the start of the drain's claim)
    SELECT coalesce(sum(cardinality(s.keys)) FILTER (WHERE s.settled_at > run.since), 0)::bigint AS objects_recent,
           coalesce(sum(cardinality(s.keys)) FILTER (WHERE s.settled_at > run.since AND s.outcome = 'deleted'), 0
                   )::bigint AS deleted_recent,
           min(s.settled_at) AS first_settled_at,
           max(s.settled_at) AS last_settled_at
    FROM run, log
    JOIN blobgc.deletion_settlement s ON s.log_id = log.id
)
SELECT run.as_of, run.dry_run, run.started_at, run.finished_at, run.rows_deleted, run.objects_deleted,
       run.bytes_deleted,
       (SELECT g.decision FROM blobgc.gate_decision g WHERE g.dag_id = run.dag_id AND g.run_id = run.run_id)
           AS decision,
       (SELECT count(*) FROM part)::bigint AS parts,
       (SELECT count(*) FILTER (WHERE done) FROM part)::bigint AS parts_done,
       items.items, items.items_done, items.planned_rows, items.planned_objects, items.rows_not_reached,
       items.objects_not_reached, owed.objects AS owed_objects, owed.parked AS parked_objects,
       settled.objects_recent, settled.deleted_recent,
       -- the seconds of the window the run was at it: from its first settlement (or item) when that is more recent
       extract(epoch FROM run.as_of - greatest(run.since, settled.first_settled_at))::float8 AS objects_window_s,
       items.rows_recent,
       extract(epoch FROM run.as_of - greatest(run.since, items.first_done_at))::float8 AS rows_window_s,
       greatest(run.started_at, items.last_item_at, owed.last_logged_at, settled.last_settled_at) AS last_activity_at
FROM run, items, owed, settled
