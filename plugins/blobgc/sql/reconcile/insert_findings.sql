-- Record keys of unknown layout or rows whose object is missing (a retried page records them once).
INSERT INTO blobgc.reconcile_finding (run_id, kind, bucket, key, source)
SELECT %(run_id)s, %(kind)s, %(bucket)s, k, %(source)s FROM unnest(%(keys)s::text[]) AS k
ON CONFLICT (run_id, kind, bucket, key) DO NOTHING
