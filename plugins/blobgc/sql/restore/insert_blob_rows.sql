-- Put back the app.blob rows a run's log holds, as used rows (unused false, updated_at now), and record each one. A row
-- whose deleted objects are not all back (verified by restore_objects) is not put back; an id that exists again is left alone.
WITH not_back AS (
    SELECT DISTINCT split_part(d.key, '/', 2) AS id
    FROM blobgc.deleted_object d
    WHERE d.dag_id = %(dag_id)s AND d.run_id = %(run_id)s AND NOT d.dry_run AND d.deleted_at IS NOT NULL
      AND d.source = 'app.blob' AND d.key LIKE 'blobs/%%'
      AND NOT EXISTS (
          SELECT 1 FROM blobgc.restore_item ri
          WHERE ri.restore_run_id = %(restore_run_id)s AND ri.kind = 'object' AND ri.bucket = d.bucket
            AND ri.item = d.key AND ri.outcome IN ('restored', 'already_restored'))
), images AS (
    SELECT r.image, EXISTS (SELECT 1 FROM not_back n WHERE n.id = r.image ->> 'id') AS missing
    FROM blobgc.deletion_log l
    CROSS JOIN LATERAL jsonb_array_elements(l.rows) AS r(image)
    WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND NOT l.dry_run AND l.source = 'app.blob'
      AND l.rows IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM blobgc.restore_item ri
          WHERE ri.restore_run_id = %(restore_run_id)s AND ri.kind = 'row' AND ri.item = 'app.blob ' || (r.image ->> 'id'))
), inserted AS (
    INSERT INTO app.blob
    SELECT (jsonb_populate_record(NULL::app.blob,
                                  image || jsonb_build_object('unused', false, 'updated_at', now()))).*
    FROM images
    WHERE NOT missing
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), recorded AS (
    INSERT INTO blobgc.restore_item (restore_run_id, source_dag_id, source_run_id, kind, bucket, item, outcome, detail)
    SELECT %(restore_run_id)s, %(dag_id)s, %(run_id)s, 'row', '', 'app.blob ' || (i.image ->> 'id'),
           CASE WHEN i.missing THEN 'failed' WHEN x.id IS NULL THEN 'not_restored' ELSE 'restored' END,
           CASE WHEN i.missing THEN 'its object is still missing after the restore, so the row was not put back'
                WHEN x.id IS NULL THEN 'a row with this id exists again; it was left as it is' END
    FROM images i
    LEFT JOIN inserted x ON x.id = i.image ->> 'id'
    ON CONFLICT DO NOTHING
    RETURNING item, outcome, detail
)
SELECT item, outcome, detail FROM recorded;
