-- Why each row of one id range of a collection is or is not in the sweep's plan, in one pass: referenced now, not marked unused (app_blob's own column, or no row in blobgc.mark_<name>), unused for less than the grace, created less than the grace ago (a NULL created_at never plans), or planned; and, of those waiting out the grace, the earliest moment one started waiting (it becomes eligible a grace later; a row whose created_at is NULL never does).
WITH judged AS (
    SELECT CASE WHEN r.blob_id IS NOT NULL THEN 'referenced'
                WHEN NOT ({unused}) THEN 'not_marked'
                WHEN {unused_since} >= %(cutoff)s THEN 'within_grace'
                WHEN {young} THEN 'young_created_at'
                ELSE 'planned' END AS why,
           greatest({unused_since}, {created_at}) AS waiting_since,
           {never_eligible} AS never_eligible
    FROM {table} AS t
    LEFT JOIN (SELECT DISTINCT x.blob_id FROM ({referenced}) AS x) AS r ON r.blob_id = t.{id}
    {mark_join}
    WHERE (%(lo)s::{type} IS NULL OR t.{id} >= %(lo)s::{type}) AND (%(hi)s::{type} IS NULL OR t.{id} < %(hi)s::{type})
)
SELECT count(*) AS considered,
       count(*) FILTER (WHERE why = 'planned') AS planned,
       count(*) FILTER (WHERE why = 'referenced') AS referenced,
       count(*) FILTER (WHERE why = 'not_marked') AS not_marked,
       count(*) FILTER (WHERE why = 'within_grace') AS within_grace,
       count(*) FILTER (WHERE why = 'young_created_at') AS young_created_at,
       min(waiting_since) FILTER (WHERE why IN ('within_grace', 'young_created_at') AND NOT never_eligible)
           AS waiting_since
FROM judged
