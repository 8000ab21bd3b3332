"""blobgc.dag_kit.steps: the shared report step emits a run's metrics once, through Airflow's StatsD."""
from __future__ import annotations

import socket
import threading

import pytest

from tests.helpers import make_blobs, run_dag


class StatsdListener:
    """A StatsD server on loopback: collects every datagram it receives."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stopped.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            self.lines += data.decode().splitlines()

    def close(self) -> list[str]:
        self.stopped.set()
        self.thread.join()
        self.sock.close()
        return self.lines


def test_a_sweep_emits_its_reclaim_metrics_once(conn, s3, bucket):
    make_blobs(conn, s3, bucket, 3, size=100)
    with conn.transaction():
        conn.execute("UPDATE app.blob SET unused = true, updated_at = now() - interval '3 days', "
                     "created_at = now() - interval '3 days'")
    listener = StatsdListener()
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW__METRICS__STATSD_ON": "True",
           "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1", "AIRFLOW__METRICS__STATSD_PORT": str(listener.port),
           "AIRFLOW__METRICS__STATSD_PREFIX": "airflow"}
    try:
        # in this process, as `airflow dags test` runs tasks: each report sets metrics up from [metrics] anew
        dry = run_dag("blobgc_sweep", conf={"dry_run": True}, env_extra=env)
        assert dry.returncode == 0, dry.output[-3000:]
        real = run_dag("blobgc_sweep", env_extra=env)
        assert real.returncode == 0, real.output[-3000:]
    finally:
        lines = listener.close()
    ours = [line for line in lines if line.startswith("airflow.blobgc.")]
    rows, objects, n_bytes = conn.execute("SELECT rows_deleted, objects_deleted, bytes_reclaimed FROM blobgc.run "
                                          "WHERE NOT dry_run").fetchone()
    assert (rows, objects) == (3, 6)
    # the real run's counters, once each (the dry run counts nothing); the owed and parked gauges after both runs
    assert sorted(line for line in ours if line.endswith("|c")) == sorted([
        f"airflow.blobgc.blobgc_sweep.objects_deleted:{objects}|c",
        f"airflow.blobgc.blobgc_sweep.bytes_reclaimed:{n_bytes}|c",
        f"airflow.blobgc.blobgc_sweep.rows_deleted:{rows}|c"])
    assert [line for line in ours if line.endswith("|g")] == ["airflow.blobgc.blobgc_sweep.owed:0|g",
                                                              "airflow.blobgc.blobgc_sweep.parked:0|g"] * 2


def test_a_retried_report_is_not_a_first_finish(conn):
    from blobgc.core.runs import RunRef, ensure_run, finish_run

    run = RunRef("blobgc_sweep", "retried-report")
    ensure_run(conn, run)
    assert finish_run(conn, run)["first_finish"] is True
    assert finish_run(conn, run)["first_finish"] is False  # its counters are not emitted again


def test_a_schema_behind_the_code_fails_the_first_task_saying_what_to_run(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 2)
    with conn.transaction():
        last = conn.execute("SELECT version, checksum, applied_at FROM blobgc.schema_migration "
                            "ORDER BY version DESC LIMIT 1").fetchone()
        conn.execute("DELETE FROM blobgc.schema_migration WHERE version = %s", (last[0],))
    try:
        result = run_dag("blobgc_sweep", env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    finally:
        with conn.transaction():
            conn.execute("INSERT INTO blobgc.schema_migration (version, checksum, applied_at) VALUES (%s, %s, %s)",
                         last)
    assert result.returncode == 1 and result.task_states["plan_shards"] == "failed", result.task_states
    assert "success" not in result.task_states.values(), result.task_states
    assert f"{last[0]} is not applied. Run `python -m blobgc.migrate --conn-id blobgc_postgres`" in result.output
    assert conn.execute("SELECT count(*) FROM app.blob WHERE id = ANY(%s)", (ids,)).fetchone()[0] == 2



def test_a_name_missing_from_a_stale_export_table_is_still_found(monkeypatch):
    """The dag-processor keeps the blobgc.dag_kit it imported first (for `worker_identity`); after an upgrade its
    export table lacks new names, and DAG files importing them must still parse."""
    import blobgc.dag_kit as dag_kit
    from blobgc.dag_kit.steps import purge_owed_cache_keys

    stale = {k: v for k, v in dag_kit._EXPORTS.items() if k != "purge_owed_cache_keys"}
    monkeypatch.setattr(dag_kit, "_EXPORTS", stale)
    assert dag_kit.purge_owed_cache_keys is purge_owed_cache_keys
    with pytest.raises(AttributeError, match="no_such_step"):
        dag_kit.no_such_step  # noqa: B018 - the lookup is the test
