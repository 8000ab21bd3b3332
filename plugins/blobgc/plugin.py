"""blobgc's Airflow plugin, as the package's `airflow.plugins` entry point names it: the reclaim page, with every
kind of collector installed (the page names where each kind's plans take their sizes from), and the deadline
reference of Variable `blobgc_deadlines`.

The plugin itself is `blobgc.reclaim.plugin`; this module sits above both it and the kinds, so that neither the
reclaim page nor the Airflow layer imports the kinds' folders, which hold DAGs built on them.
"""

from __future__ import annotations

from blobgc.dag_kit.deadlines import DataIntervalEnd
from blobgc.kinds import KINDS
from blobgc.reclaim.plugin import BlobgcReclaimPlugin

# Airflow looks a custom deadline reference up among the plugins' `deadline_references` wherever it creates a run
# (the scheduler, the api-server, `airflow dags test`): blobgc's deadlines count from the data interval's end.
BlobgcReclaimPlugin.deadline_references = [DataIntervalEnd]

__all__ = ["BlobgcReclaimPlugin", "KINDS"]
