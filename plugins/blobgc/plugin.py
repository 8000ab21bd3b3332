"""blobgc's Airflow plugin, as the package's `airflow.plugins` entry point names it: the reclaim page, with every
kind of collector installed (the page names where each kind's plans take their sizes from).

The plugin itself is `blobgc.reclaim.plugin`; this module sits above both it and the kinds, so that neither the
reclaim page nor the Airflow layer imports the kinds' folders, which hold DAGs built on them.
"""

from __future__ import annotations

from blobgc.kinds import KINDS
from blobgc.reclaim.plugin import BlobgcReclaimPlugin

__all__ = ["BlobgcReclaimPlugin", "KINDS"]
