"""The reclaim page's FastAPI app, mounted by the Airflow plugin under /blobgc.

Airflow mounts plugin apps without any authentication, so every route here depends on
`require_airflow_user`: the caller must carry a valid Airflow JWT (the UI's session cookie or a bearer
token) and be allowed to view the Airflow website. A browser without one is sent to Airflow's login
page and back; a BI tool without one gets 401.

A run is shown only to a user whom Airflow's auth manager lets read that DAG's runs (`blobgc.reclaim.run_access`:
GET on DagAccessEntity.RUN, as Airflow's own DAG-run endpoint asks). A receipt (its page, its JSON or its progress
alone), manifest or undo of a run of a DAG the user may not read answers 403, whether or not such a run exists, so
the answer tells nothing about the DAG's runs; the reclaim page and its JSON leave out the runs in progress, runs,
daily figures and owed deletions of such DAGs (and reconcile's findings unless the user may read blobgc_reconcile's
runs).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Annotated, Any

import anyio
import psycopg
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from starlette.concurrency import iterate_in_threadpool
from starlette.types import Receive, Scope, Send

from blobgc.dag_kit.connections import pg_connection
from blobgc.reclaim import undo
from blobgc.reclaim.manifest import FORMATS, manifest_chunks, manifest_filename
from blobgc.reclaim.page import render_page
from blobgc.reclaim.progress import run_progress
from blobgc.reclaim.receipt_page import render_forbidden, render_not_found, render_receipt
from blobgc.reclaim.receipts import collect_receipt, find_run, record_undo_request, undo_refusal
from blobgc.reclaim.report import collect_report, run_dag_ids
from blobgc.reclaim.routes import RECEIPT_ROUTE, URL_PREFIX  # noqa: F401 - URL_PREFIX: the plugin's
from blobgc.reclaim.run_access import may_read_runs, readable_dag_ids


async def require_airflow_user(request: Request) -> Any:
    """The authenticated Airflow user allowed to view the website; 401/403, or a login redirect for pages."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

    bearer: HTTPAuthorizationCredentials | None = await HTTPBearer(auto_error=False)(request)
    try:
        user = await get_user(request, None, bearer)
    except HTTPException as exc:
        if exc.status_code == status.HTTP_401_UNAUTHORIZED and "text/html" in request.headers.get("accept", ""):
            login = get_auth_manager().get_url_login(next_url=str(request.url))
            raise HTTPException(status.HTTP_303_SEE_OTHER, headers={"Location": login}) from exc
        raise
    if not get_auth_manager().is_authorized_view(access_view=AccessView.WEBSITE, user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="Forbidden")
    return user


AirflowUser = Annotated[Any, Depends(require_airflow_user)]
Days = Annotated[int, Query(ge=1, le=366, description="how many days back, today included (UTC)")]
PerDag = Annotated[int, Query(ge=1, le=50, description="last runs shown per DAG and dry-run flag")]
Collection = Annotated[
    str | None,
    Query(pattern=r"^[a-z][a-z0-9_]{0,47}$", description="only this collection's daily figures (default: all)"),
]


DagId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_.\-]{1,250}$", description="the DAG of the run")]
RunId = Annotated[str, Path(min_length=1, max_length=250, description="the run's id")]
NO_STORE = {"Cache-Control": "no-store"}


class ClosingStreamingResponse(StreamingResponse):
    """A StreamingResponse over a sync generator that is closed however the response ends, a client that
    hangs up mid-download included, so the generator's `finally` (closing its database connection) runs at
    once rather than whenever the garbage collector gets to it."""

    def __init__(self, source: Generator[str, None, None], **kwargs: Any) -> None:
        self.source = source
        super().__init__(iterate_in_threadpool(source), **kwargs)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.source.close)


def root_path(request: Request) -> str:
    """Where this app is mounted (/blobgc), for links that work from any page of it."""
    return request.scope.get("root_path", "").rstrip("/")


def load_report(user: Any, days: int, per_dag: int, collection: str | None = None) -> dict[str, Any]:
    """The reclaim report of the DAGs whose runs `user` may read."""
    with pg_connection() as conn:
        readable = readable_dag_ids(user, run_dag_ids(conn))
        return collect_report(conn, days=days, per_dag=per_dag, collection=collection, dag_ids=readable)


def forbidden_detail(dag_id: str) -> str:
    return f"you may not read runs of DAG {dag_id!r}, so you may not see its receipts, manifests or undo its runs"


def check_may_read_runs(user: Any, dag_id: str) -> None:
    """403 for a DAG whose runs `user` may not read, asked before anything about the run is looked up."""
    if not may_read_runs(user, dag_id):
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=forbidden_detail(dag_id))


def no_such_run(dag_id: str, run_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, detail=f"blobgc has no run {run_id!r} of {dag_id!r}")


def run_json(
    user: Any, dag_id: str, run_id: str, collect: Callable[[psycopg.Connection, str, str], dict[str, Any] | None]
) -> JSONResponse:
    """What `collect` makes of one run, as JSON: 403 for a DAG whose runs `user` may not read (asked first, whether
    or not the run exists), 404 for a run blobgc has not recorded."""
    check_may_read_runs(user, dag_id)
    with pg_connection() as conn:
        found = collect(conn, dag_id, run_id)
    if found is None:
        raise no_such_run(dag_id, run_id)
    return JSONResponse(found, headers=NO_STORE)


def create_app() -> FastAPI:
    app = FastAPI(
        title="blobgc storage reclaim",
        description="What blobgc reclaimed, owes and found.",
        dependencies=[Depends(require_airflow_user)],
    )

    @app.get("/reclaim", response_class=HTMLResponse, summary="The storage reclaim page")
    def reclaim_page(
        user: AirflowUser, days: Days = 30, per_dag: PerDag = 5, collection: Collection = None
    ) -> HTMLResponse:
        report = load_report(user, days, per_dag, collection)
        query = f"days={days}&per_dag={per_dag}" + (f"&collection={collection}" if collection else "")
        return HTMLResponse(
            render_page(report, json_href=f"api/reclaim?{query}"), headers={"Cache-Control": "no-store"}
        )

    @app.get("/api/reclaim", summary="The storage reclaim report as JSON, for BI tools")
    def reclaim_json(
        user: AirflowUser, days: Days = 30, per_dag: PerDag = 5, collection: Collection = None
    ) -> dict[str, Any]:
        return load_report(user, days, per_dag, collection)

    @app.get(RECEIPT_ROUTE, response_class=HTMLResponse, summary="A run's receipt page")
    def receipt_page(request: Request, user: AirflowUser, dag_id: DagId, run_id: RunId) -> HTMLResponse:
        if not may_read_runs(user, dag_id):
            return HTMLResponse(
                render_forbidden(dag_id, root_path(request)), status_code=status.HTTP_403_FORBIDDEN, headers=NO_STORE
            )
        with pg_connection() as conn:
            receipt = collect_receipt(conn, dag_id, run_id)
        if receipt is None:
            return HTMLResponse(render_not_found(dag_id, run_id, root_path(request)), status_code=404, headers=NO_STORE)
        may_undo = undo.may_trigger_restore(user)
        token = undo.user_token(request)
        paused = undo.restore_paused(token) if may_undo and receipt["undoable"] else None
        states = undo.restore_run_states(token, [u["restore_run_id"] for u in receipt["restore"]["requests"][:5]])
        return HTMLResponse(
            render_receipt(receipt, root=root_path(request), may_undo=may_undo, paused=paused, restore_states=states),
            headers=NO_STORE,
        )

    @app.get(
        "/api/runs/{dag_id}/{run_id:path}/manifest.{fmt}",
        summary="Every key of a run, as CSV or JSON",
        response_class=StreamingResponse,
    )
    def manifest(
        user: AirflowUser, dag_id: DagId, run_id: RunId, fmt: Annotated[str, Path(pattern="^(csv|json)$")]
    ) -> StreamingResponse:
        check_may_read_runs(user, dag_id)
        with pg_connection() as conn:
            if find_run(conn, dag_id, run_id) is None:
                raise no_such_run(dag_id, run_id)
        filename = manifest_filename(dag_id, run_id, fmt)
        return ClosingStreamingResponse(
            manifest_chunks(pg_connection, dag_id, run_id, fmt),
            media_type=FORMATS[fmt],
            headers={**NO_STORE, "Content-Disposition": f'attachment; filename="{filename}"'},
        )

    # After the manifest's route, and the progress before the whole run: a run id may hold slashes ({run_id:path}).
    @app.get(
        "/api/runs/{dag_id}/{run_id:path}/progress",
        summary="A run's progress: parts done and left, deleted so far, the current rate and the estimated end",
    )
    def run_progress_json(user: AirflowUser, dag_id: DagId, run_id: RunId) -> JSONResponse:
        return run_json(user, dag_id, run_id, run_progress)

    @app.get("/api/runs/{dag_id}/{run_id:path}", summary="A run's receipt as JSON, its progress included")
    def receipt_json(user: AirflowUser, dag_id: DagId, run_id: RunId) -> JSONResponse:
        return run_json(user, dag_id, run_id, collect_receipt)

    @app.post("/api/runs/{dag_id}/{run_id:path}/undo", summary="Undo a run: trigger blobgc_restore for it, as you")
    def undo_run(request: Request, user: AirflowUser, dag_id: DagId, run_id: RunId) -> JSONResponse:
        forged = undo.same_origin_refusal(request)
        if forged:
            raise HTTPException(status.HTTP_403_FORBIDDEN, detail=forged)
        if not undo.may_trigger_restore(user):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN, detail="you may not trigger blobgc_restore, so you may not undo a run"
            )
        check_may_read_runs(user, dag_id)
        with pg_connection() as conn:
            if find_run(conn, dag_id, run_id) is None:
                raise no_such_run(dag_id, run_id)
            refusal = undo_refusal(conn, dag_id, run_id)
            if refusal:
                raise HTTPException(status.HTTP_409_CONFLICT, detail=refusal)
            token = undo.user_token(request)
            if not token:
                raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail="Not authenticated")
            name = undo.user_name(user)
            try:
                triggered = undo.trigger_restore(token, dag_id, run_id, name)
            except undo.Refusal as error:
                raise HTTPException(error.status, detail=error.detail) from error
            record_undo_request(conn, dag_id, run_id, triggered["dag_run_id"], name)
        paused = undo.restore_paused(token)
        message = (
            "blobgc_restore is paused: the restore waits until it is unpaused."
            if paused
            else "The receipt shows its outcome once it finishes."
        )
        return JSONResponse(
            {
                "restore_run_id": triggered["dag_run_id"],
                "state": triggered.get("state"),
                "dag_id": undo.RESTORE_DAG_ID,
                "paused": paused,
                "message": message,
            },
            status_code=status.HTTP_201_CREATED,
            headers=NO_STORE,
        )

    return app
