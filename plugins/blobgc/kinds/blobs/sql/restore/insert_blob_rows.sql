-- Put back the app.blob rows of a run's log that restore_rows checked, as used rows (unused false, updated_at now), and
-- record each checked row: put back; failed, with the reason, when an object it forms is missing from the store (it is
-- not put back); or left alone when its id exists again.
WITH checked AS (
    SELECT c.item, c.reason FROM unnest(%(items)s::text[], %(reasons)s::text[]) AS c(item, reason)
), images AS (
    SELECT r.image, c.item, c.reason
    FROM blobgc.deletion_log l
    CROSS JOIN LATERAL jsonb_array_elements(l.rows) AS r(image)
    JOIN checked c ON c.item = 'app.blob ' || (r.image ->> 'id')
    WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND NOT l.dry_run AND l.source = 'app.blob'
      AND l.rows IS NOT NULL
), inserted AS (
    INSERT INTO app.blob
    SELECT (jsonb_populate_record(NULL::app.blob,
                                  image || jsonb_build_object('unused', false, 'updated_at', now()))).*
    FROM images
    WHERE reason IS NULL
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), recorded AS (
    INSERT INTO blobgc.restore_item (restore_run_id, source_dag_id, source_run_id, kind, bucket, item, outcome, detail)
    SELECT %(restore_run_id)s, %(dag_id)s, %(run_id)s, 'row', '', i.item,
           CASE WHEN i.reason IS NOT NULL THEN 'failed' WHEN x.id IS NULL THEN 'not_restored' ELSE 'restored' END,
           CASE WHEN i.reason IS NOT NULL THEN i.reason
                WHEN x.id IS NULL THEN 'a row with this id exists again; it was left as it is' END
    FROM images i
    LEFT JOIN inserted x ON 'app.blob ' || x.id = i.item
    ON CONFLICT DO NOTHING
    RETURNING item, outcome, detail
)
SELECT item, outcome, detail FROM recorded;
