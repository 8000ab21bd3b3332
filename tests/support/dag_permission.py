"""An auth manager with per-DAG permissions, for the tests of who may see which runs.

The local stack runs SimpleAuthManager, whose roles grant a permission on every DAG or on none. FAB or Keycloak
can grant a user some DAGs and not others; `DagScopedAuthManager` is SimpleAuthManager plus exactly that: the
users of `DENIED` may do nothing with the DAGs listed for them, and everything else is SimpleAuthManager's own
answer. `dag_scoped_auth_manager` installs it through Airflow's own mechanism, `[core] auth_manager`, and
Airflow's own factory (`create_auth_manager`), for code that runs in this process (the reclaim app under
FastAPI's TestClient); the running api-server keeps SimpleAuthManager.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

READER = "sweep_reader"  # role viewer: may read every DAG's runs but blobgc_reconcile's
OPERATOR = "sweep_operator"  # role user: may trigger DAGs (blobgc_restore too), but may not read blobgc_reconcile
DENIED_DAG = "blobgc_reconcile"
DENIED: dict[str, frozenset[str]] = {READER: frozenset({DENIED_DAG}), OPERATOR: frozenset({DENIED_DAG})}
ROLES = {READER: "viewer", OPERATOR: "user", "admin": "admin"}


class DagScopedAuthManager(SimpleAuthManager):
    """SimpleAuthManager, except that the users of DENIED may do nothing with their denied DAGs."""

    def is_authorized_dag(self, *, method: Any, user: SimpleAuthManagerUser,
                          access_entity: DagAccessEntity | None = None, details: DagDetails | None = None) -> bool:
        if details is not None and details.id in DENIED.get(user.get_name(), frozenset()):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)


@contextmanager
def dag_scoped_auth_manager(monkeypatch: Any) -> Iterator[DagScopedAuthManager]:
    """DagScopedAuthManager as this process's Airflow auth manager, the one before it put back afterwards."""
    from airflow.api_fastapi import app as airflow_app

    previous = airflow_app._AuthManagerState.instance
    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", f"{__name__}.{DagScopedAuthManager.__name__}")
    manager = airflow_app.create_auth_manager()
    if not isinstance(manager, DagScopedAuthManager):
        raise RuntimeError(f"[core] auth_manager did not take: Airflow created {type(manager).__name__}")
    try:
        yield manager
    finally:
        airflow_app._AuthManagerState.instance = previous


def token_of(manager: DagScopedAuthManager, username: str) -> str:
    """A JWT for `username` (its role from ROLES), signed as Airflow's /auth/token signs one."""
    return manager.generate_jwt(SimpleAuthManagerUser(username=username, role=ROLES[username]))
