-- Record what a restore did with one object or row; a retry that meets it again keeps the first record.
INSERT INTO blobgc.restore_item (restore_run_id, source_dag_id, source_run_id, kind, bucket, item, version_id,
                                 outcome, detail)
VALUES (%(restore_run_id)s, %(source_dag_id)s, %(source_run_id)s, %(kind)s, %(bucket)s, %(item)s, %(version_id)s,
        %(outcome)s, %(detail)s)
ON CONFLICT DO NOTHING;
