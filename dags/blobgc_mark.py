"""blobgc_mark: marks the rows of every collection unused or used, from every reference (docs/reference.md §6).

Defined in the blobgc package (blobgc.dags.blobgc_mark); this file enables it.
"""
from blobgc.dags import load  # airflow DAG from the installed blobgc package

dag = load("blobgc_mark")
