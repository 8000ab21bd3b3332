"""blobgc's Airflow plugin: the storage reclaim page (a FastAPI app) and its entry in the UI's nav.

The one `.py` the plugin loader should execute; the library under plugins/blobgc/ is listed in
plugins/.airflowignore. Nothing connects to a database at import time.
"""
from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from blobgc.reclaim.app import URL_PREFIX, create_app


class BlobgcReclaimPlugin(AirflowPlugin):
    name = "blobgc"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "blobgc storage reclaim"}]
    external_views = [{
        "name": "Storage reclaim",
        "href": f"{URL_PREFIX}/reclaim",
        "destination": "nav",
        "category": "browse",
        "url_route": "blobgc_reclaim",
        "icon": None,
    }]
