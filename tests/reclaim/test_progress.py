"""A run's live progress and ETA (issue "Gentle on production"): `blobgc.reclaim.progress`, the receipt's Progress
section and its self-refresh, the run's JSON, and the reclaim page's runs in progress.

The figures are checked on rows written into the tests' own database; the pages through the reclaim app in this
process under FastAPI's TestClient (as test_receipt_dag_permission.py), reading that database; and a real
blobgc_sweep, slowed by Variable blobgc_rate_limits, runs in a thread while its receipt is read twice.
"""
from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from blobgc.core.clients import pg_connect
from blobgc.core.rate import REDIS_PREFIX
from blobgc.reclaim.app import create_app
from blobgc.reclaim.page import render_page
from blobgc.reclaim.progress import REFRESH_MAX_S, REFRESH_S, run_progress, with_refresh
from blobgc.reclaim.report import collect_report
from tests.helpers import make_blobs, object_keys, run_dag, set_unused_since
from tests.support.dag_permission import DENIED_DAG, READER, dag_scoped_auth_manager, token_of

DAG = "blobgc_sweep"
META_REFRESH = re.compile(r'<meta http-equiv="refresh" content="(\d+)">')


def add_run(conn, run_id: str, *, dag_id: str = DAG, dry: bool = False, finished: bool = False,
            decision: str | None = "passed", rows: int = 0, objects: int = 0) -> None:
    conn.execute("INSERT INTO blobgc.run (dag_id, run_id, dry_run, started_at, finished_at, rows_deleted, "
                 "objects_deleted, bytes_deleted, plan_run_id) VALUES (%s, %s, %s, now() - interval '10 minutes', "
                 "CASE WHEN %s THEN now() END, %s, %s, %s, %s)",
                 (dag_id, run_id, dry, finished, rows, objects, objects * 100, run_id))
    if decision is not None:
        conn.execute("INSERT INTO blobgc.gate_decision (dag_id, run_id, plan_run_id, planned_rows, planned_objects, "
                     "planned_bytes, judgement, decision) VALUES (%s, %s, %s, 0, 0, 0, '{}', %s)",
                     (dag_id, run_id, run_id, decision))


def add_item(conn, run_id: str, part: str, rows: int, keys: int, *, dag_id: str = DAG,
             seconds_ago: float = 0) -> tuple[int, list[str]]:
    """A plan item of `rows` rows and `keys` keys in `part`, planned `seconds_ago`: its id and keys."""
    names = [f"{part}/{run_id}/{i}-{time.monotonic_ns()}" for i in range(keys)]
    item_id = conn.execute(
        "INSERT INTO blobgc.plan_item (dag_id, run_id, part, collection, source, bucket, row_ids, keys, sizes, "
        "planned_at) VALUES (%s, %s, %s, 'app_blob', 'app.blob', 'blobgc', %s, %s, %s, "
        "now() - make_interval(secs => %s)) RETURNING id",
        (dag_id, run_id, part, [f"r{i}" for i in range(rows)] or None, names, [100] * keys,
         seconds_ago)).fetchone()[0]
    return item_id, names


def add_outcome(conn, run_id: str, item_id: int, rows_deleted: int, seconds_ago: float, *, dag_id: str = DAG) -> None:
    conn.execute("INSERT INTO blobgc.plan_outcome (dag_id, run_id, item_id, rows_deleted, objects_owed, done_at) "
                 "VALUES (%s, %s, %s, %s, 0, now() - make_interval(secs => %s))",
                 (dag_id, run_id, item_id, rows_deleted, seconds_ago))


def add_log(conn, run_id: str, keys: list[str], *, dag_id: str = DAG, seconds_ago: float = 0) -> int:
    """A deletion log row of `keys`, logged `seconds_ago`: its id."""
    return conn.execute("INSERT INTO blobgc.deletion_log (dag_id, run_id, source, bucket, keys, sizes, logged_at) "
                        "VALUES (%s, %s, 'app.blob', 'blobgc', %s, %s, now() - make_interval(secs => %s)) "
                        "RETURNING id", (dag_id, run_id, keys, [100] * len(keys), seconds_ago)).fetchone()[0]


def owe(conn, log_id: int, *, parked: bool = False, dag_id: str = DAG) -> None:
    conn.execute("INSERT INTO blobgc.outbox (log_id, dag_id, bucket, parked_at) "
                 "VALUES (%s, %s, 'blobgc', CASE WHEN %s THEN now() END)", (log_id, dag_id, parked))


def settle(conn, log_id: int, run_id: str, keys: list[str], outcome: str, seconds_ago: float) -> None:
    conn.execute("INSERT INTO blobgc.deletion_settlement (log_id, run_id, keys, outcome, settled_at) "
                 "VALUES (%s, %s, %s, %s, now() - make_interval(secs => %s))",
                 (log_id, run_id, keys, outcome, seconds_ago))


def ends_at(progress: dict) -> float:
    """Seconds from the progress's `as_of` to its ETA."""
    return (datetime.fromisoformat(progress["eta"]) - datetime.fromisoformat(progress["as_of"])).total_seconds()


@pytest.fixture
def client(conn, monkeypatch):
    """The reclaim app under DagScopedAuthManager, and a bearer header per user."""
    with dag_scoped_auth_manager(monkeypatch) as manager:
        headers = {user: {"Authorization": f"Bearer {token_of(manager, user)}"} for user in (READER, "admin")}
        yield TestClient(create_app()), headers


# --------------------------------------------------------------------------------------------- the figures
def test_progress_counts_parts_done_and_left_and_the_objects_left_of_the_plan(conn):
    """Part "0" is done (both items), part "1" not reached; of the objects owed, one log row is settled and one is
    still owed: left = the keys of the item not reached + the keys still owed."""
    with conn.transaction():
        add_run(conn, "exec", rows=3, objects=3)
        i1, keys1 = add_item(conn, "exec", "0", 2, 4)
        i2, keys2 = add_item(conn, "exec", "0", 1, 2)
        add_item(conn, "exec", "1", 2, 4)
        add_outcome(conn, "exec", i1, 2, 30)
        add_outcome(conn, "exec", i2, 1, 20)
        log_1 = add_log(conn, "exec", keys1)
        settle(conn, log_1, "exec", keys1[:3], "deleted", 30)
        settle(conn, log_1, "exec", keys1[3:], "absent", 30)
        owe(conn, add_log(conn, "exec", keys2))

    p = run_progress(conn, DAG, "exec")

    assert p["finished"] is False and p["phase"] == "executing"
    assert p["parts"] == {"total": 2, "done": 1, "left": 1}
    assert p["items"] == {"total": 3, "done": 2, "left": 1}
    assert p["rows"] == {"planned": 5, "deleted": 3, "left": 2}
    assert p["objects"] == {"planned": 10, "deleted": 3, "left": 4 + 2, "parked": 0}
    assert p["bytes_deleted"] == 300
    # 4 keys dealt with (3 deleted, 1 absent) in the 30 s since the first settlement; rows: 3 since the first item
    assert p["rate"]["objects_per_second"] == pytest.approx(4 / 30, rel=0.02)
    assert p["rate"]["objects_deleted_per_second"] == pytest.approx(3 / 30, rel=0.02)
    assert p["rate"]["rows_per_second"] == pytest.approx(3 / 30, rel=0.02)
    assert p["eta_seconds"] == pytest.approx(6 / (4 / 30), rel=0.02)
    assert ends_at(p) == pytest.approx(p["eta_seconds"], abs=0.1)
    assert p["refresh_seconds"] == REFRESH_S and p["last_activity_at"] is not None


def test_while_parts_execute_and_nothing_is_drained_yet_the_eta_is_the_executions_end(conn):
    """The drain starts when the parts are done: while they execute, no key is settled, and the estimate is the end
    of the execution at the rows' rate (3 rows in the 30 s since the first item; 2 rows left: 20 s)."""
    with conn.transaction():
        add_run(conn, "executing", rows=3, objects=6)
        i1, keys1 = add_item(conn, "executing", "0", 2, 4)
        i2, keys2 = add_item(conn, "executing", "0", 1, 2)
        add_item(conn, "executing", "1", 2, 4)
        add_outcome(conn, "executing", i1, 2, 30)
        add_outcome(conn, "executing", i2, 1, 20)
        owe(conn, add_log(conn, "executing", keys1 + keys2))

    p = run_progress(conn, DAG, "executing")

    assert p["phase"] == "executing" and p["rate"]["objects_per_second"] == 0
    assert p["eta_of"] == "rows" and p["eta_seconds"] == pytest.approx(2 / (3 / 30), rel=0.02)


def test_progress_rate_counts_the_last_minute_and_the_eta_leaves_parked_keys_out(conn):
    """Settled 120 s ago (outside the window), 50 s and 20 s ago (inside): 60 keys in 60 s. 60 keys owed and 10
    parked are left; the ETA is the 60 the drain can reach at 1 key/s."""
    with conn.transaction():
        add_run(conn, "drain", objects=160)
        item, keys = add_item(conn, "drain", "0", 0, 230)
        add_outcome(conn, "drain", item, 0, 130)
        for start, end, ago in ((0, 100, 120), (100, 130, 50), (130, 160, 20)):
            settle(conn, add_log(conn, "drain", keys[start:end]), "drain", keys[start:end], "deleted", ago)
        owe(conn, add_log(conn, "drain", keys[160:220]))
        owe(conn, add_log(conn, "drain", keys[220:]), parked=True)

    p = run_progress(conn, DAG, "drain")

    assert p["phase"] == "draining" and p["parts"] == {"total": 1, "done": 1, "left": 0}
    assert p["objects"] == {"planned": 230, "deleted": 160, "left": 70, "parked": 10}
    assert p["rate"]["window_seconds"] == 60
    assert p["rate"]["objects_per_second"] == pytest.approx(1.0, rel=0.02)
    assert p["eta_seconds"] == pytest.approx(60, rel=0.02)
    assert ends_at(p) == pytest.approx(p["eta_seconds"], abs=0.1)


def test_progress_has_no_eta_when_the_rate_is_zero_or_nothing_is_planned(conn):
    with conn.transaction():
        add_run(conn, "stalled", objects=10)
        item, keys = add_item(conn, "stalled", "0", 0, 20, seconds_ago=600)
        add_outcome(conn, "stalled", item, 0, 600)
        log_id = add_log(conn, "stalled", keys[:10], seconds_ago=600)
        settle(conn, log_id, "stalled", keys[:10], "deleted", 300)  # its last activity, 5 min ago
        owe(conn, add_log(conn, "stalled", keys[10:], seconds_ago=600))
        add_run(conn, "empty", decision=None)
        add_run(conn, "nothing", objects=0)

    stalled = run_progress(conn, DAG, "stalled")
    assert stalled["objects"]["left"] == 10 and stalled["rate"]["objects_per_second"] == 0
    assert stalled["eta"] is None and stalled["eta_seconds"] is None
    assert stalled["idle_seconds"] == pytest.approx(300, abs=5)

    for run_id, phase in (("empty", "planning"), ("nothing", "finishing")):  # no plan: nothing planned, nothing left
        p = run_progress(conn, DAG, run_id)
        assert p["phase"] == phase and p["eta"] is None and p["parts"] == {"total": 0, "done": 0, "left": 0}
        assert p["objects"] == {"planned": 0, "deleted": 0, "left": 0, "parked": 0}
    assert run_progress(conn, DAG, "no_such_run") is None


def test_progress_of_finished_dry_and_gated_runs(conn):
    with conn.transaction():
        add_run(conn, "done", finished=True, rows=2, objects=4)
        item, keys = add_item(conn, "done", "0", 2, 4)
        add_outcome(conn, "done", item, 2, 40)
        settle(conn, add_log(conn, "done", keys), "done", keys, "deleted", 30)
        add_run(conn, "dry", dry=True, decision=None)
        add_item(conn, "dry", "0", 3, 6)
        add_item(conn, "dry", "1", 1, 2)
        add_run(conn, "waiting", decision="waiting")
        add_run(conn, "rejected", decision="rejected")

    done = run_progress(conn, DAG, "done")
    assert done["finished"] is True and done["phase"] == "finished" and done["finished_at"] is not None
    assert done["rate"] is None and done["eta"] is None and done["refresh_seconds"] is None
    assert done["parts"] == {"total": 1, "done": 1, "left": 0}
    assert done["objects"] == {"planned": 4, "deleted": 4, "left": 0, "parked": 0}

    dry = run_progress(conn, DAG, "dry")  # a dry run only plans: what it planned so far, nothing done or left
    assert dry["phase"] == "planning" and dry["dry_run"] is True
    assert dry["parts"] == {"total": 2, "done": None, "left": None}
    assert dry["rows"] == {"planned": 4, "deleted": None, "left": None}
    assert dry["objects"]["planned"] == 8 and dry["objects"]["left"] is None
    assert dry["rate"] is None and dry["eta"] is None and dry["refresh_seconds"] == REFRESH_S

    assert run_progress(conn, DAG, "waiting")["phase"] == "waiting"
    assert run_progress(conn, DAG, "rejected")["phase"] == "refused"


def test_an_unfinished_runs_refresh_grows_with_what_building_its_receipt_took():
    going, finished = {"finished": False, "refresh_seconds": REFRESH_S}, {"finished": True, "refresh_seconds": None}
    assert with_refresh(going, 0.05)["refresh_seconds"] == REFRESH_S
    assert with_refresh(going, 2.0)["refresh_seconds"] == 20  # ten times a 2 s build
    assert with_refresh(going, 30.0)["refresh_seconds"] == 300  # a 30 s build: every 5 min
    assert with_refresh(going, 120.0)["refresh_seconds"] == REFRESH_MAX_S
    assert with_refresh(finished, 30.0)["refresh_seconds"] is None


# --------------------------------------------------------------------------------------------- the pages
def scripts_and_sources(page: str) -> tuple[list[str], list[str]]:
    """Every <script> opening tag, and every src/href the page loads from another origin."""
    tags = re.findall(r"<script\b[^>]*>", page)
    external = re.findall(r'(?:src|href)="((?:https?:)?//[^"]*)"', page)
    return tags, external


def progress_values(page: str) -> dict[str, str]:
    """data-field -> data-value of the rows of the receipt's Progress table."""
    section = page.split('<table id="progress"', 1)[1].split("</table>", 1)[0]
    return dict(re.findall(r'data-field="([^"]+)" data-value="([^"]*)"', section))


def test_receipt_refreshes_itself_and_shows_progress_only_while_the_run_is_unfinished(conn, client):
    with conn.transaction():
        add_run(conn, "going", objects=1)
        item, keys = add_item(conn, "going", "0", 1, 3)
        add_outcome(conn, "going", item, 1, 10)
        settle(conn, add_log(conn, "going", keys[:1]), "going", keys[:1], "deleted", 5)
        owe(conn, add_log(conn, "going", keys[1:]))
        add_run(conn, "over", finished=True, objects=2)
    app, headers = client

    going = app.get("/runs/blobgc_sweep/going", headers=headers["admin"])
    assert going.status_code == 200 and going.headers["cache-control"] == "no-store"
    head = going.text.split("</head>", 1)[0]
    (refresh,) = META_REFRESH.findall(head)
    assert int(refresh) >= REFRESH_S
    assert going.text.index('<table id="progress"') < going.text.index('<table id="run"')  # at the top
    values = progress_values(going.text)
    assert values["phase"] == "draining" and values["parts_done"] == "1"
    assert (values["objects_deleted"], values["objects_left"]) == ("1", "2")
    assert 'id="progress-bar" value="1" max="3"' in going.text  # 1 of the 3 planned objects dealt with
    assert values["eta"]  # 1 key dealt with in the 5 s since the first: 2 left, about 10 s
    tags, external = scripts_and_sources(going.text)
    assert external == [] and all(tag == "<script>" for tag in tags)  # no CDN, no script from anywhere

    over = app.get("/runs/blobgc_sweep/over", headers=headers["admin"])
    assert over.status_code == 200
    assert 'http-equiv="refresh"' not in over.text and '<table id="progress"' not in over.text
    assert scripts_and_sources(over.text)[1] == []


def test_the_runs_json_and_its_progress_route_serve_the_same_figures(conn, client):
    with conn.transaction():
        add_run(conn, "manual__2026-11-28T03:00:00+00:00", objects=2)
        item, keys = add_item(conn, "manual__2026-11-28T03:00:00+00:00", "0", 0, 5)
        add_outcome(conn, "manual__2026-11-28T03:00:00+00:00", item, 0, 20)
        log_id = add_log(conn, "manual__2026-11-28T03:00:00+00:00", keys)
        settle(conn, log_id, "manual__2026-11-28T03:00:00+00:00", keys[:2], "deleted", 10)
        add_run(conn, "secret_run", dag_id=DENIED_DAG)
    app, headers = client
    run = quote("manual__2026-11-28T03:00:00+00:00", safe="")

    receipt = app.get(f"/api/runs/blobgc_sweep/{run}", headers=headers[READER])
    assert receipt.status_code == 200 and receipt.headers["cache-control"] == "no-store"
    body = receipt.json()
    assert body["run"]["run_id"] == "manual__2026-11-28T03:00:00+00:00"
    progress = body["progress"]
    assert progress["finished"] is False and progress["objects"]["deleted"] == 2
    assert progress["refresh_seconds"] >= REFRESH_S and progress["rate"]["objects_per_second"] > 0
    alone = app.get(f"/api/runs/blobgc_sweep/{run}/progress", headers=headers[READER]).json()
    same = ("parts", "items", "rows", "objects", "bytes_deleted", "phase", "finished")
    assert {k: alone[k] for k in same} == {k: progress[k] for k in same}
    assert f'href="/api/runs/blobgc_sweep/{run}"' in app.get(f"/runs/blobgc_sweep/{run}",
                                                              headers=headers[READER]).text
    # the manifest keeps its route: the run's JSON does not swallow it
    manifest = app.get(f"/api/runs/blobgc_sweep/{run}/manifest.json", headers=headers[READER])
    assert manifest.status_code == 200 and "attachment" in manifest.headers["content-disposition"]

    for path in (f"/api/runs/{DENIED_DAG}/secret_run", f"/api/runs/{DENIED_DAG}/secret_run/progress"):
        denied = app.get(path, headers=headers[READER])
        assert denied.status_code == 403 and "may not read runs" in denied.json()["detail"]
    for path in ("/api/runs/blobgc_sweep/no_such_run", "/api/runs/blobgc_sweep/no_such_run/progress"):
        assert app.get(path, headers=headers[READER]).status_code == 404


def test_reclaim_page_lists_runs_in_progress_at_the_top(conn, client):
    with conn.transaction():
        add_run(conn, "going", objects=4)
        item, keys = add_item(conn, "going", "0", 0, 10)
        add_outcome(conn, "going", item, 0, 20)
        settle(conn, add_log(conn, "going", keys[:4]), "going", keys[:4], "deleted", 10)
        owe(conn, add_log(conn, "going", keys[4:]))
        add_run(conn, "over", finished=True, objects=3)
        add_run(conn, "secret_run", dag_id=DENIED_DAG)
        add_run(conn, "stale")  # nothing done for two hours: most likely stopped before its report task
        conn.execute("UPDATE blobgc.run SET started_at = now() - interval '2 hours' WHERE run_id = 'stale'")

    report = collect_report(conn, days=2)
    assert [(r["dag_id"], r["run_id"]) for r in report["in_progress"]] == [
        (DENIED_DAG, "secret_run"), (DAG, "going"), (DAG, "stale")]
    going = next(r for r in report["in_progress"] if r["run_id"] == "going")["progress"]
    assert going["objects"] == {"planned": 10, "deleted": 4, "left": 6, "parked": 0} and going["eta"] is not None
    json.dumps(report)

    page = render_page(report)
    table = page.split('<table id="in-progress">', 1)[1].split("</table>", 1)[0]
    assert page.index('<table id="in-progress">') < page.index("<svg") < page.index('<table id="daily">')
    row = re.search(r'<tr data-dag="blobgc_sweep" data-run-id="going"[^>]*>', table).group(0)
    assert 'data-phase="draining"' in row and 'data-parts-done="1"' in row and 'data-parts="1"' in row
    assert 'data-objects="4"' in row and 'data-objects-left="6"' in row
    assert 'href="runs/blobgc_sweep/going"' in table and 'data-run-id="over"' not in table
    stale = table.split('data-run-id="stale"', 1)[1].split("</tr>", 1)[0]
    assert "stopped? see its Airflow run" in stale and "stopped?" not in row

    app, headers = client  # a reader sees only the runs in progress of the DAGs it may read
    shown = app.get("/reclaim?days=2", headers=headers[READER]).text
    assert 'data-run-id="going"' in shown.split('<table id="in-progress">', 1)[1].split("</table>", 1)[0]
    assert "secret_run" not in shown
    assert [r["run_id"] for r in app.get("/api/reclaim?days=2", headers=headers[READER]).json()["in_progress"]] == [
        "going", "stale"]

    with conn.transaction():
        conn.execute("UPDATE blobgc.run SET finished_at = now()")
    assert 'id="in-progress-none"' in render_page(collect_report(conn, days=2))


# --------------------------------------------------------------------------------------------- a real sweep
def read_twice_while_draining(dsn: str, app: TestClient, headers: dict, ended: threading.Event, *,
                              apart: float = 5.5, timeout: float = 240) -> tuple[str, str, str]:
    """Once the sweep run's drain has deleted some of its objects (while the run is unfinished): its id, and its
    receipt page read twice, `apart` seconds apart. Fails when the run ends first or nothing is deleted in time."""
    deadline = time.monotonic() + timeout
    with pg_connect(dsn) as watcher:
        while True:
            row = watcher.execute("SELECT run_id FROM blobgc.run WHERE dag_id = %s AND finished_at IS NULL "
                                  "AND objects_deleted > 0", (DAG,)).fetchone()
            if row:
                break
            if ended.is_set() or time.monotonic() > deadline:
                raise AssertionError(f"no unfinished {DAG} run was seen deleting objects (the run "
                                     f"{'ended' if ended.is_set() else 'took longer than the timeout'})")
            time.sleep(0.2)
    path = f"/runs/{DAG}/{quote(row[0], safe='')}"
    first = app.get(path, headers=headers).text
    time.sleep(apart)
    return row[0], first, app.get(path, headers=headers).text


def test_a_running_sweeps_receipt_shows_progress_that_advances_between_two_requests(conn, test_dsn, s3, bucket, redis,
                                                                                   monkeypatch):
    """400 orphan blobs (800 objects) swept under a cap of 40 deletes a second: the drain takes about 20 s. The
    receipt, read twice 5 s apart while it drains, shows more deleted and less left the second time, at about the
    capped rate, and refreshes itself; once the run has finished it shows no progress and no refresh.

    The figures are what the drain committed: a drain's claim holds at least one log row, `batch_size` rows' keys,
    until all of them are deleted. Batches of 20 rows (40 keys) make each claim about 100 keys, 2.5 s of the cap (5 s
    with the two drains side by side), so the drain commits between the two reads; with the default 1000 rows, each
    of the two drains would hold its 400 keys for the whole 20 s. Airflow's task runner must run in the main thread
    (it sets a SIGTERM handler), so the run goes there and the receipt is read from a thread beside it."""
    ids = make_blobs(conn, s3, bucket, 400)
    set_unused_since(conn, ids, "2 days")
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_RATE_LIMITS": json.dumps({"default": 40})}
    ended = threading.Event()
    try:
        with dag_scoped_auth_manager(monkeypatch) as manager, ThreadPoolExecutor(1) as pool:
            app, headers = TestClient(create_app()), {"Authorization": f"Bearer {token_of(manager, 'admin')}"}
            reading = pool.submit(read_twice_while_draining, test_dsn, app, headers, ended)
            try:
                sweep = run_dag(DAG, conf={"batch_size": 20}, env_extra=env)
            finally:
                ended.set()
            assert sweep.returncode == 0, sweep.output[-3000:]
            run_id, first, second = reading.result(timeout=60)
            after = app.get(f"/runs/{DAG}/{quote(run_id, safe='')}", headers=headers).text
            final = app.get(f"/api/runs/{DAG}/{quote(run_id, safe='')}", headers=headers).json()
    finally:
        redis.delete(REDIS_PREFIX + bucket)

    for page in (first, second):
        assert META_REFRESH.search(page.split("</head>", 1)[0]), "an unfinished run's receipt refreshes itself"
    one, two = progress_values(first), progress_values(second)
    assert one["phase"] == two["phase"] == "draining"
    assert int(two["objects_deleted"]) > int(one["objects_deleted"]) > 0
    assert int(two["objects_left"]) < int(one["objects_left"])
    assert 0 < float(two["objects_per_second"]) <= 2 * 40  # about the cap (its burst and a claim's rounding aside)
    assert one["eta"] and two["eta"]  # a rate, and objects left: an estimated end
    parts = re.search(r'data-field="parts_done" data-value="(\d+)"><th>[^<]*</th><td><b>\d+</b> of (\d+)', second)
    assert parts and parts.group(1) == parts.group(2)  # every part's rows are deleted: the drain is what is left

    assert 'http-equiv="refresh"' not in after and '<table id="progress"' not in after
    assert final["progress"]["finished"] is True and final["progress"]["refresh_seconds"] is None
    assert final["progress"]["objects"] == {"planned": 800, "deleted": 800, "left": 0, "parked": 0}
    assert object_keys(s3, bucket) == set()
