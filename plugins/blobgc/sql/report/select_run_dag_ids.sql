-- Every DAG blobgc has runs or owed deletions of: the DAGs whose read permission the reclaim page asks about.
SELECT dag_id FROM blobgc.run
UNION
SELECT dag_id FROM blobgc.outbox;
