"""blobgc_media_staging: deletes abandoned staging uploads of the S3-only media store (seed 004).

Defined in the blobgc package (blobgc.kinds.media.dag); this file enables it.
"""
from blobgc.dags import load  # airflow DAG from the installed blobgc package

dag = load("blobgc_media_staging")
