"""The gate's test kit: a gate Variable with floors low enough for a test's handful of objects, a DAG run's
environment, and a person answering a waiting gate through Airflow's REST API."""
from __future__ import annotations

import json
import threading
import time
import urllib.parse

import psycopg

from tests.helpers import airflow_api

# floors low enough for a test's handful of objects: 10x the median of 2 objects waits, a first run of 4 does not
SMALL_GATE = json.dumps({"ratio": 5, "min_objects": 5, "min_bytes": 10**12, "history": 10})


def env(bucket: str, **extra: str) -> dict[str, str]:
    """A run's environment: Variable blobgc_bucket, and `extra` (AIRFLOW_VAR_*, ...)."""
    return {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket, **extra}


class Answer(threading.Thread):
    """Answers the gate of the one waiting run of `dag_id` through the REST API, as the UI does.

    Only a gate whose waiting is recorded in this session's database (`dsn`) is this test's: another session
    running gate tests on the same Airflow stack has gates of its own waiting."""

    def __init__(self, dag_id: str, option: str | None, dsn: str):
        super().__init__(daemon=True)
        self.dag_id, self.option, self.dsn = dag_id, option, dsn
        self.detail: dict | None = None
        self.error: BaseException | None = None

    def ours(self, run_id: str) -> bool:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute("SELECT EXISTS (SELECT 1 FROM blobgc.gate_decision WHERE dag_id = %s AND run_id = %s "
                                "AND decision = 'waiting')", (self.dag_id, run_id)).fetchone()[0]

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                waiting = airflow_api(f"/api/v2/dags/{self.dag_id}/dagRuns/~/hitlDetails?response_received=false")
                pending = [d for d in waiting.get("hitl_details", [])
                           if d["task_instance"]["task_id"] == "gate"
                           and d["task_instance"]["state"] == "awaiting_input"
                           and self.ours(d["task_instance"]["dag_run_id"])]
                if pending:
                    self.detail = pending[0]
                    if self.option is not None:
                        ti = self.detail["task_instance"]
                        airflow_api(f"/api/v2/dags/{self.dag_id}/dagRuns/{ti['dag_run_id']}/taskInstances/gate/-1/"
                                    "hitlDetails", method="PATCH", body={"chosen_options": [self.option]})
                    return
                time.sleep(1)
            raise AssertionError("no gate waited for an answer")
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error


def asked(dag_id: str, run_id: str) -> dict:
    """What the gate of run `run_id` asked a person, read back after the run through the REST API: the gate's
    Human-in-the-loop detail (subject, options, who answered, what was chosen). A gate nobody answered keeps its
    detail, with `responded_by_user` None and its default chosen when it timed out."""
    run = urllib.parse.quote(run_id, safe="")
    return airflow_api(f"/api/v2/dags/{dag_id}/dagRuns/{run}/taskInstances/gate/-1/hitlDetails")
