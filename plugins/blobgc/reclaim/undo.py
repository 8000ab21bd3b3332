""" "Undo this run": blobgc_restore triggered through Airflow's own REST API, as the signed-in user.

blobgc never triggers a DAG with powers of its own here: it forwards the caller's JWT (the bearer header, or the
UI's `_token` cookie), so Airflow applies that user's permissions, records the trigger under that user, and a
user who may not trigger blobgc_restore is refused by Airflow as well as by `may_trigger_restore`.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from fastapi import Request

from blobgc.reclaim.receipts import RESTORE_DAG_ID

UNDO_HEADER = "X-Blobgc-Action"  # a cross-site HTML form cannot send a custom header; a fetch() must be same-origin
UNDO_HEADER_VALUE = "undo"
TIMEOUT = httpx.Timeout(10.0)


class Refusal(Exception):
    """Airflow's REST API refused or failed: its status and message."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def user_token(request: Request) -> str | None:
    """The JWT the request was authenticated with, as Airflow's get_user reads it: bearer first, then cookie."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials:
        return credentials.strip()
    return request.cookies.get(COOKIE_NAME_JWT_TOKEN)


def may_trigger_restore(user: Any) -> bool:
    """Whether Airflow's auth manager lets `user` trigger blobgc_restore (POST a DAG run of it)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return get_auth_manager().is_authorized_dag(
        method="POST", access_entity=DagAccessEntity.RUN, details=DagDetails(id=RESTORE_DAG_ID), user=user
    )


def user_name(user: Any) -> str:
    name = getattr(user, "get_name", None)
    return str(name() if callable(name) else getattr(user, "username", user))


def same_origin_refusal(request: Request) -> str | None:
    """Why a state-changing request may be a forged cross-site one, or None: it must carry the custom header,
    and its Origin, when the browser sends one, must be this server's."""
    if request.headers.get(UNDO_HEADER, "").lower() != UNDO_HEADER_VALUE:
        return f"missing header {UNDO_HEADER}: {UNDO_HEADER_VALUE} (the receipt page's button sends it)"
    origin = request.headers.get("origin")
    if origin is not None:
        host = request.headers.get("host", "")
        parts = urlsplit(origin)
        if origin == "null" or parts.netloc.lower() != host.lower() or parts.scheme not in ("http", "https"):
            return f"cross-origin request refused (Origin {origin!r}, this server is {host!r})"
    return None


def api_base() -> str:
    """Airflow's REST API root, from [api] base_url (this api-server, as the UI reaches it)."""
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback="http://localhost:8080").rstrip("/") + "/api/v2"


def _airflow(method: str, path: str, token: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    try:
        response = httpx.request(
            method,
            api_base() + path,
            json=body,
            timeout=TIMEOUT,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )
    except httpx.HTTPError as error:
        raise Refusal(502, f"Airflow's REST API could not be reached: {error}") from error
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise Refusal(
            response.status_code if response.status_code < 500 else 502,
            f"Airflow answered {response.status_code}: {detail}",
        )
    return response.json()


def restore_run_id() -> str:
    return f"undo__{datetime.now(UTC):%Y%m%dT%H%M%S}_{uuid.uuid4().hex[:6]}"


def trigger_restore(token: str, dag_id: str, run_id: str, requested_by: str) -> dict[str, Any]:
    """Trigger blobgc_restore for one run as the token's user; the new DAG run as Airflow returns it."""
    return _airflow(
        "POST",
        f"/dags/{RESTORE_DAG_ID}/dagRuns",
        token,
        {
            "dag_run_id": restore_run_id(),
            "logical_date": None,
            "conf": {"run_id": run_id, "source_dag_id": dag_id},
            "note": f"Undo from receipt by {requested_by}",
        },
    )


def restore_paused(token: str | None) -> bool | None:
    """Whether blobgc_restore is paused (its runs then wait), as the token's user sees it; None if unknown."""
    if not token:
        return None
    try:
        return bool(_airflow("GET", f"/dags/{RESTORE_DAG_ID}", token).get("is_paused"))
    except Refusal:
        return None


def restore_run_states(token: str | None, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The Airflow state (queued, running, success, failed) and end of blobgc_restore's runs, as the token's user
    sees them; a run Airflow does not show is left out."""
    states: dict[str, dict[str, Any]] = {}
    for run_id in run_ids if token else []:
        try:
            run = _airflow("GET", f"/dags/{RESTORE_DAG_ID}/dagRuns/{quote(run_id, safe='')}", token or "")
        except Refusal:
            continue
        states[run_id] = {"state": run.get("state"), "end_date": run.get("end_date")}
    return states
