"""blobgc_paste_expiry: expires pastes (seed 002: app.paste, app.content, Redis cache keys).

Defined in the blobgc package (blobgc.kinds.pastes.dag); this file enables it.
"""
from blobgc.dags import load  # airflow DAG from the installed blobgc package

dag = load("blobgc_paste_expiry")
