"""blobgc: garbage collection of user-uploaded media across PostgreSQL, S3 and Redis.

Layers, each importing only those below it (README "Layout", checked by `make layers`):
`blobgc.reclaim` (the reclaim page), `blobgc.dag_kit` (the Airflow layer), `blobgc.collectors` (one
module per job, plain functions), `blobgc.core` (key layouts, outbox, S3, runs, settings: no
application, no Airflow). The DAGs in dags/ are wiring over them.
"""
