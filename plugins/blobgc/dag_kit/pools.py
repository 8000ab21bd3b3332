"""The pools a DAG's tasks use, checked by its first task: a missing pool fails the run, saying how to create it.

Airflow 3.3 does not fail a task whose pool does not exist. The scheduler leaves it `scheduled` for ever,
logging "Tasks using non-existent pool '...' will not be scheduled" on every loop
(`SchedulerJobRunner._executable_task_instances_to_queued`); the run stays `running` and, with
`max_active_runs=1`, holds back every later run. `airflow dags test` ignores pools and runs it anyway.

A running task cannot ask Airflow's metadata database (the Task SDK blocks it) and the execution API it
talks to has no pool endpoint. The one interface that says which pools exist without the database is the
public REST API (`GET /api/v2/pools/{name}`), so that is what the check asks, as the Airflow user of
connection `blobgc_airflow_api` (type http: host the api-server's base URL, login and password of a user
allowed to read pools; tokens come from `POST /auth/token`, as in the simple and FAB auth managers).
Without that connection the check cannot see the pools: it logs a warning saying so and lets the run go on.
"""

from __future__ import annotations

import json
import logging
import shlex
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from blobgc.core.settings import ConfigurationError
from blobgc.dag_kit.params import HTTP_POOL, S3_POOL

log = logging.getLogger(__name__)

AIRFLOW_API_CONN_ID = "blobgc_airflow_api"
DEFAULT_POOL = "default_pool"  # Airflow's own, created by `airflow db migrate`
API_TIMEOUT_SECONDS = 30


@dataclass(frozen=True)
class PoolSpec:
    """What `airflow pools set` is given for a pool: its slots and description."""

    slots: int
    description: str


# The pools blobgc's DAGs use, as airflow_settings.yaml and docker-compose.yaml create them.
POOLS: dict[str, PoolSpec] = {
    S3_POOL: PoolSpec(4, "S3 batch deletes (blobgc)"),
    HTTP_POOL: PoolSpec(4, "partner photo downloads (blobgc_crawler)"),
}


class MissingPools(ConfigurationError):
    """A DAG's tasks use pools the Airflow deployment does not have: they would wait in `scheduled` for ever."""


def missing_pool_message(name: str) -> str:
    """What to say about one missing pool: the command that creates it, and where else to declare it."""
    spec = POOLS.get(name)
    command = (
        shlex.join(["airflow", "pools", "set", name, str(spec.slots), spec.description])
        if spec
        else f"airflow pools set {shlex.quote(name)} <slots> '<description>'"
    )
    return (
        f"pool '{name}' does not exist: create it with `{command}` "
        "(or in the UI: Admin → Pools, or airflow_settings.yaml for the Astro CLI)"
    )


def check_pools_exist(names: Iterable[str], pool_exists: Callable[[str], bool]) -> None:
    """Raise MissingPools naming every pool of `names` that `pool_exists` denies, each with how to create it."""
    missing = [name for name in sorted(set(names) - {DEFAULT_POOL}) if not pool_exists(name)]
    if missing:
        raise MissingPools("; ".join(missing_pool_message(name) for name in missing))


def pools_of(dag: Any) -> set[str]:
    """The pools `dag`'s tasks use, Airflow's default pool aside."""
    return {task.pool for task in dag.tasks if task.pool and task.pool != DEFAULT_POOL}


def check_dag_pools(task: Any, conn_id: str = AIRFLOW_API_CONN_ID) -> None:
    """In a first task (one with no upstream), raise MissingPools when a pool its DAG uses does not exist.

    :param task: the running task (the context's `task`); any other task of the DAG returns at once.
    """
    if task.upstream_task_ids:
        return
    names = pools_of(task.dag)
    if not names:
        return
    api = AirflowPoolsApi.from_connection(conn_id)
    if api is None:
        log.warning(
            "pools %s not checked: no Airflow connection %r to ask the REST API which pools exist. A "
            "task in a missing pool waits in 'scheduled' for ever; add the connection (type http, "
            "the api-server's URL, a user allowed to read pools) to have this task check them",
            ", ".join(sorted(names)),
            conn_id,
        )
        return
    try:
        check_pools_exist(names, api.pool_exists)
    except (urllib.error.URLError, OSError) as error:  # HTTPError (a 5xx) included; 401/403/404 are answered above
        log.warning(
            "pools %s not checked: the Airflow REST API at %s did not answer (%s). The run goes on: an "
            "api-server outage must not stop garbage collection",
            ", ".join(sorted(names)),
            api.base_url,
            error,
        )
        return
    log.info("pools %s exist", ", ".join(sorted(names)))


class AirflowPoolsApi:
    """Which pools exist, from the Airflow public REST API (`GET /api/v2/pools/{name}`) as one Airflow user."""

    def __init__(self, base_url: str, username: str, password: str, conn_id: str = AIRFLOW_API_CONN_ID) -> None:
        self.base_url = base_url.rstrip("/")
        self.conn_id = conn_id
        self._username = username
        self._password = password
        self._token: str | None = None

    @classmethod
    def from_connection(cls, conn_id: str = AIRFLOW_API_CONN_ID) -> AirflowPoolsApi | None:
        """The API of connection `conn_id` (type http), or None when no such connection is defined."""
        from airflow.sdk import Connection
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            c = Connection.get(conn_id)
        except AirflowNotFoundException:
            return None
        if not c.host or not c.login:
            raise ConfigurationError(
                f"connection {conn_id!r} needs a host (the api-server's URL, e.g. "
                "http://airflow-apiserver:8080) and the login of an Airflow user"
            )
        return cls(base_url_of(c.host, c.port, c.schema), c.login, c.password or "", conn_id)

    def pool_exists(self, name: str) -> bool:
        """True if the pool `name` exists, False if the API answers 404."""
        try:
            self._call(
                "GET",
                f"/api/v2/pools/{urllib.parse.quote(name, safe='')}",
                headers={"Authorization": f"Bearer {self._bearer()}"},
            )
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return False
            if error.code in (401, 403):
                raise ConfigurationError(
                    f"the Airflow REST API refused to show pool {name!r} to user "
                    f"{self._username!r} (HTTP {error.code}): give it read access to pools"
                ) from error
            raise
        return True

    def _bearer(self) -> str:
        if self._token is None:
            try:
                body = self._call("POST", "/auth/token", data={"username": self._username, "password": self._password})
            except urllib.error.HTTPError as error:
                if error.code in (400, 401, 403, 422):
                    raise ConfigurationError(
                        f"the Airflow api-server at {self.base_url} refused user "
                        f"{self._username!r} a token (HTTP {error.code}): check the login "
                        f"and password of connection {self.conn_id!r}"
                    ) from error
                raise
            self._token = body["access_token"]
        return self._token

    def _call(self, method: str, path: str, *, data: dict | None = None, headers: dict[str, str] | None = None) -> dict:
        request = urllib.request.Request(
            self.base_url + path,
            method=method,
            data=json.dumps(data).encode() if data is not None else None,
            headers={"Accept": "application/json", "Content-Type": "application/json", **(headers or {})},
        )
        with urllib.request.urlopen(request, timeout=API_TIMEOUT_SECONDS) as response:  # noqa: S310 - http(s) only
            return json.load(response)


def base_url_of(host: str, port: int | None, schema: str | None) -> str:
    """The api-server's base URL from an http connection's fields: a host with a scheme is taken as it is
    (a path prefix included); otherwise the scheme is the connection's schema field (default http), as the
    http provider reads it."""
    if "://" in host:
        if urllib.parse.urlsplit(host).scheme not in ("http", "https"):
            raise ConfigurationError(f"the Airflow API connection's host must be an http(s) URL, got {host!r}")
        return host.rstrip("/")
    scheme = schema if schema in ("http", "https") else "http"
    return f"{scheme}://{host}" + (f":{port}" if port else "")
