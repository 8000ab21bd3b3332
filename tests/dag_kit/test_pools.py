"""blobgc.dag_kit.pools: a DAG's first task fails, saying how to create it, when a pool its tasks use is missing.

Against the running stack: its api-server answers which pools exist (as admin), and the tests' own pools
are created and deleted with the `airflow pools` CLI; the stack's blobgc_s3 and blobgc_http are only read.
"""
from __future__ import annotations

import json
import logging
import shlex
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from blobgc.core.settings import ConfigurationError
from blobgc.dag_kit.params import HTTP_POOL, S3_POOL
from blobgc.dag_kit.pools import (
    AIRFLOW_API_CONN_ID, POOLS, AirflowPoolsApi, MissingPools, PoolSpec, base_url_of, check_dag_pools,
    check_pools_exist, missing_pool_message, pools_of,
)
from blobgc.dag_kit.steps import failing_fast
from tests.helpers import AIRFLOW_API, airflow, airflow_api, airflow_token

CONN_ENV = f"AIRFLOW_CONN_{AIRFLOW_API_CONN_ID.upper()}"
UI_HINT = "(or in the UI: Admin → Pools, or airflow_settings.yaml for the Astro CLI)"


def api_connection(password: str = "admin", host: str = AIRFLOW_API) -> str:
    """Connection blobgc_airflow_api as an environment variable: the stack's api-server, as its admin."""
    return json.dumps({"conn_type": "http", "host": host, "login": "admin", "password": password})


def dag_using(*pools: str) -> Any:
    """A DAG whose first task is in no pool and whose later tasks use `pools`, as blobgc's DAGs are wired."""
    from airflow.sdk import DAG, task

    with DAG(f"blobgc_test_pools_{uuid.uuid4().hex[:8]}", schedule=None) as dag:
        @task(task_id="first")
        def first() -> None:
            pass

        previous = first()
        for i, pool in enumerate(pools):
            @task(task_id=f"pooled_{i}", pool=pool)
            def pooled() -> None:
                pass

            current = pooled()
            previous >> current
            previous = current
    return dag


def pool_names() -> set[str]:
    """The stack's pools, from its REST API (a second; the CLI takes five)."""
    return {pool["name"] for pool in airflow_api("/api/v2/pools?limit=1000")["pools"]}


@pytest.fixture
def with_api_connection(stack, monkeypatch) -> None:
    monkeypatch.setenv(CONN_ENV, api_connection())


@pytest.fixture
def missing_pool(stack) -> Iterator[str]:
    """A pool name of the test's own, absent from the stack; deleted again if the test created it."""
    name = f"blobgc_test_{uuid.uuid4().hex[:12]}"
    yield name
    if name in pool_names():
        request = urllib.request.Request(f"{AIRFLOW_API}/api/v2/pools/{name}", method="DELETE",
                                         headers={"Authorization": f"Bearer {airflow_token()}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 204


def test_a_missing_pool_fails_the_first_task_saying_how_to_create_it(with_api_connection, missing_pool,
                                                                     monkeypatch):
    """The message's command, run as it is, creates the pool; then the same check passes (issue 18)."""
    monkeypatch.setitem(POOLS, missing_pool, PoolSpec(2, "blobgc's tests (deleted after)"))
    dag = dag_using(missing_pool)
    with pytest.raises(MissingPools) as raised:
        check_dag_pools(dag.get_task("first"))
    command = f"airflow pools set {missing_pool} 2 'blobgc'\"'\"'s tests (deleted after)'"
    assert str(raised.value) == f"pool '{missing_pool}' does not exist: create it with `{command}` {UI_HINT}"
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match=f"pool '{missing_pool}' does not exist"), failing_fast():
        check_dag_pools(dag.get_task("first"))  # a setting no retry can fix: the task fails without retries

    argv = shlex.split(command)
    created = airflow(*argv[1:], timeout=120)
    assert created.returncode == 0, created.stderr
    check_dag_pools(dag.get_task("first"))


def test_the_stacks_pools_pass_and_their_messages_give_the_declared_commands(with_api_connection):
    dag = dag_using(S3_POOL, HTTP_POOL)
    assert pools_of(dag) == {S3_POOL, HTTP_POOL}
    check_dag_pools(dag.get_task("first"))  # the stack (`make up`) creates both, as compose's init does
    api = AirflowPoolsApi.from_connection()
    assert api is not None and api.pool_exists(S3_POOL) and api.pool_exists(HTTP_POOL)
    assert missing_pool_message(S3_POOL) == (
        "pool 'blobgc_s3' does not exist: create it with `airflow pools set blobgc_s3 4 'S3 batch deletes (blobgc)'` "
        "(or in the UI: Admin → Pools, or airflow_settings.yaml for the Astro CLI)")
    with pytest.raises(MissingPools) as raised:
        check_pools_exist([S3_POOL, HTTP_POOL, "default_pool"], lambda name: False)
    assert str(raised.value) == "; ".join([
        missing_pool_message(HTTP_POOL), missing_pool_message(S3_POOL)])  # each missing pool, never default_pool
    assert "`airflow pools set blobgc_http 4 'partner photo downloads (blobgc_crawler)'`" in str(raised.value)


def test_a_missing_pool_among_existing_ones_is_named_alone(with_api_connection, missing_pool):
    dag = dag_using(S3_POOL, missing_pool, HTTP_POOL)
    with pytest.raises(MissingPools) as raised:
        check_dag_pools(dag.get_task("first"))
    assert str(raised.value) == (f"pool '{missing_pool}' does not exist: create it with "
                                 f"`airflow pools set {missing_pool} <slots> '<description>'` {UI_HINT}")


def test_only_a_first_task_checks(stack, monkeypatch, missing_pool, caplog):
    """A later task returns at once, asking nothing: the connection points nowhere, and only asking would log so."""
    monkeypatch.setenv(CONN_ENV, api_connection(host="http://127.0.0.1:9"))
    dag = dag_using(missing_pool)
    with caplog.at_level(logging.INFO, logger="blobgc.dag_kit.pools"):
        check_dag_pools(dag.get_task("pooled_0"))
        assert not caplog.records
        check_dag_pools(dag.get_task("first"))
    assert "did not answer" in caplog.text


def test_without_the_api_connection_the_check_says_it_could_not_look(stack, monkeypatch, missing_pool, caplog):
    monkeypatch.delenv(CONN_ENV, raising=False)
    dag = dag_using(missing_pool)
    with caplog.at_level(logging.WARNING, logger="blobgc.dag_kit.pools"):
        check_dag_pools(dag.get_task("first"))
    assert f"pools {missing_pool} not checked: no Airflow connection 'blobgc_airflow_api'" in caplog.text


def test_a_refused_login_fails_naming_the_connection(stack, monkeypatch):
    monkeypatch.setenv(CONN_ENV, api_connection(password=f"wrong-{uuid.uuid4().hex}"))
    with pytest.raises(ConfigurationError, match="refused user 'admin' a token .*blobgc_airflow_api"):
        check_dag_pools(dag_using(S3_POOL).get_task("first"))


def test_the_api_url_comes_from_the_http_connections_fields():
    assert base_url_of("http://airflow-apiserver:8080/", None, None) == "http://airflow-apiserver:8080"
    assert base_url_of("https://airflow.example.com/prefix", 443, None) == "https://airflow.example.com/prefix"
    assert base_url_of("airflow-apiserver", 8080, None) == "http://airflow-apiserver:8080"
    assert base_url_of("airflow.example.com", None, "https") == "https://airflow.example.com"
    with pytest.raises(ConfigurationError, match="http"):
        base_url_of("file:///etc/passwd", None, None)


def test_a_real_sweep_run_without_its_s3_pool_fails_its_first_task_and_deletes_nothing(
        stack, conn, s3, bucket, with_api_connection):
    """The wiring: gc_step's first task (plan_shards) asks the REST API, and the pooled tasks never start. No
    other test worker runs a DAG while the stack's pool is gone."""
    from tests.helpers import every_dag_alone, make_blobs, run_dag, set_unused_since

    ids = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, ids, "3 days")
    saved = airflow_api(f"/api/v2/pools/{S3_POOL}")
    request = urllib.request.Request(f"{AIRFLOW_API}/api/v2/pools/{S3_POOL}", method="DELETE",
                                     headers={"Authorization": f"Bearer {airflow_token()}"})
    with every_dag_alone():
        urllib.request.urlopen(request, timeout=30).close()
        try:
            run = run_dag("blobgc_sweep", env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
        finally:  # the stack's pool comes back as it was
            airflow_api("/api/v2/pools", method="POST", body={k: saved[k] for k in (
                "name", "slots", "description", "include_deferred")})
    assert run.returncode == 1 and run.task_states["plan_shards"] == "failed", run.task_states
    assert "success" not in run.task_states.values(), run.task_states
    assert f"pool '{S3_POOL}' does not exist: create it with `airflow pools set {S3_POOL} 4" in run.output
    assert conn.execute("SELECT count(*) FROM app.blob WHERE id = ANY(%s)", (ids,)).fetchone()[0] == 2
    assert S3_POOL in pool_names()


def test_an_api_server_that_does_not_answer_only_warns(stack, monkeypatch, missing_pool, caplog):
    """An api-server outage must not stop garbage collection: the check says it could not look, and the run goes on."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    monkeypatch.setenv(CONN_ENV, api_connection(host=f"http://127.0.0.1:{closed}"))
    dag = dag_using(missing_pool)
    with caplog.at_level(logging.WARNING, logger="blobgc.dag_kit.pools"):
        check_dag_pools(dag.get_task("first"))
    assert f"pools {missing_pool} not checked: the Airflow REST API at http://127.0.0.1:{closed} did not answer" \
        in caplog.text
