"""blobgc's Airflow plugin for a checkout's plugins folder. An installed blobgc wheel registers the same class
through its `airflow.plugins` entry point, and then this file defines nothing, so that the plugin is not
loaded twice (docker-compose installs the wheel and still mounts plugins/ for the demo application). The one
`.py` the plugin loader should execute: the library under plugins/blobgc/ is listed in plugins/.airflowignore.
"""

from __future__ import annotations

from importlib.metadata import entry_points

if not any(ep.value.startswith("blobgc.") for ep in entry_points(group="airflow.plugins")):
    from blobgc.plugin import BlobgcReclaimPlugin

    __all__ = ["BlobgcReclaimPlugin"]
