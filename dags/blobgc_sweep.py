"""blobgc_sweep: deletes rows of every collection unused for longer than their grace, then their objects.

Defined in the blobgc package (blobgc.dags.blobgc_sweep); this file enables it.
"""
from blobgc.dags import load  # airflow DAG from the installed blobgc package

dag = load("blobgc_sweep")
