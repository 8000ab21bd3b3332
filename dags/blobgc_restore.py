"""blobgc_restore: undoes one run's deletions on a versioned bucket.

Defined in the blobgc package (blobgc.dags.blobgc_restore); this file enables it.
"""
from blobgc.dags import load  # airflow DAG from the installed blobgc package

dag = load("blobgc_restore")
