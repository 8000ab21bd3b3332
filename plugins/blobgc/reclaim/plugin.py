"""blobgc's Airflow plugin: the storage reclaim page (a FastAPI app) and its entry in the UI's nav.

Registered through the `airflow.plugins` entry point of the blobgc package (pyproject.toml: `blobgc.plugin`,
which installs the kinds first), so an installed wheel brings it with no file in the plugins folder; a
checkout's plugins folder loads it from plugins/blobgc_reclaim_plugin.py. Nothing connects to a database at import time.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from blobgc.reclaim.app import create_app
from blobgc.reclaim.routes import URL_PREFIX


class BlobgcReclaimPlugin(AirflowPlugin):
    name = "blobgc"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "blobgc storage reclaim"}]
    external_views = [
        {
            "name": "Storage reclaim",
            "href": f"{URL_PREFIX}/reclaim",
            "destination": "nav",
            "category": "browse",
            "url_route": "blobgc_reclaim",
            "icon": None,
        }
    ]
