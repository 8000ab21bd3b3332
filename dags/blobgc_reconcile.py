"""blobgc_reconcile: lists the buckets and deletes objects no row accounts for, older than an age floor.

Defined in the blobgc package (blobgc.dags.blobgc_reconcile); this file enables it.
"""
from blobgc.dags import load  # airflow DAG from the installed blobgc package

dag = load("blobgc_reconcile")
