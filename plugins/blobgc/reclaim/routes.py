"""The reclaim page's routes, where a link to them is formed: the app (`blobgc.reclaim.app`) is mounted under
`URL_PREFIX` by the plugin and defines its receipt route from `RECEIPT_ROUTE`; a DAG hands `receipt_path` down
to its gate (`blobgc.dag_kit.builder.destructive_dag`), which links the plan it asks a person about. Nothing here
imports FastAPI: a DAG file imports it at every parse."""

from __future__ import annotations

from urllib.parse import quote

URL_PREFIX = "/blobgc"  # where the plugin mounts the app
RECEIPT_ROUTE = "/runs/{dag_id}/{run_id:path}"  # a run's receipt page, within the app


def receipt_path(dag_id: str, run_id: str) -> str:
    """The receipt page of a run, from the api-server's root (`/blobgc/runs/<dag_id>/<run_id>`)."""
    route = RECEIPT_ROUTE.replace("{dag_id}", quote(dag_id, safe="")).replace("{run_id:path}", quote(run_id, safe=""))
    return URL_PREFIX + route
