"""The reclaim page's FastAPI app, mounted by the Airflow plugin under /blobgc.

Airflow mounts plugin apps without any authentication, so every route here depends on
`require_airflow_user`: the caller must carry a valid Airflow JWT (the UI's session cookie or a bearer
token) and be allowed to view the Airflow website. A browser without one is sent to Airflow's login
page and back; a BI tool without one gets 401.
"""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse

from blobgc.dag_kit.connections import pg_connection
from blobgc.reclaim.page import render_page
from blobgc.reclaim.report import collect_report

URL_PREFIX = "/blobgc"


async def require_airflow_user(request: Request) -> Any:
    """The authenticated Airflow user allowed to view the website; 401/403, or a login redirect for pages."""
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import get_user

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
Collection = Annotated[str | None, Query(pattern=r"^[a-z][a-z0-9_]{0,47}$",
                                         description="only this collection's daily figures (default: all)")]


def load_report(days: int, per_dag: int, collection: str | None = None) -> dict[str, Any]:
    with pg_connection() as conn:
        return collect_report(conn, days=days, per_dag=per_dag, collection=collection)


def create_app() -> FastAPI:
    app = FastAPI(title="blobgc storage reclaim", description="What blobgc reclaimed, owes and found.",
                  dependencies=[Depends(require_airflow_user)])

    @app.get("/reclaim", response_class=HTMLResponse, summary="The storage reclaim page")
    def reclaim_page(user: AirflowUser, days: Days = 30, per_dag: PerDag = 5,
                     collection: Collection = None) -> HTMLResponse:
        report = load_report(days, per_dag, collection)
        query = f"days={days}&per_dag={per_dag}" + (f"&collection={collection}" if collection else "")
        return HTMLResponse(render_page(report, json_href=f"api/reclaim?{query}"),
                            headers={"Cache-Control": "no-store"})

    @app.get("/api/reclaim", summary="The storage reclaim report as JSON, for BI tools")
    def reclaim_json(user: AirflowUser, days: Days = 30, per_dag: PerDag = 5,
                     collection: Collection = None) -> dict[str, Any]:
        return load_report(days, per_dag, collection)

    return app
