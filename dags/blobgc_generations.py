"""blobgc_generations: generation-based GC with a bloom filter (seed 003: schema gen).

Defined in the blobgc package (blobgc.kinds.generations.dag); this file enables it.
"""
from blobgc.dags import load  # airflow DAG from the installed blobgc package

dag = load("blobgc_generations")
