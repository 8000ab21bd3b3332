"""blobgc_image_cleanup: removes unbound crawled images (seed 001: app.image).

Defined in the blobgc package (blobgc.kinds.images.dag); this file enables it.
"""
from blobgc.dags import load  # airflow DAG from the installed blobgc package

dag = load("blobgc_image_cleanup")
