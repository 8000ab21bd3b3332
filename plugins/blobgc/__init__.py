"""blobgc: garbage collection of user-uploaded media across PostgreSQL, S3 and Redis.

Layers, each importing only those below it (README "Layout", checked by `make layers`):
`blobgc.dags` (the DAGs, enabled one by one from a DAG folder), `blobgc.reclaim` (the reclaim page and
the Airflow plugin), `blobgc.dag_kit` (the Airflow layer), `blobgc.collectors` (one module per job,
plain functions), `blobgc.core` (key layouts, outbox, S3, runs, settings: no application, no Airflow).
SQL ships as package data in `blobgc/sql/`.
"""

from __future__ import annotations

__version__ = "1.6.0"
