"""Receipts (/blobgc/runs/...), manifests and "Undo this run", against the running api-server and scheduler.

Runs are written into the stack's application database (the one the api-server reads) under DAG ids or run
ids of this module's own, and removed afterwards.
"""
from __future__ import annotations

import csv
import http.client
import io
import json
import os
import re
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import quote, urlsplit

import psycopg
import pytest

from tests.helpers import AIRFLOW_API, airflow_api, airflow_token, dag_lock
from tests.reclaim.test_app import ARTIFACTS, ROOT
from blobgc.core.quarantine import QuarantinePolicy
from tests.support.restore import swept_run

DAG = f"blobgc_receipt_test_{uuid.uuid4().hex[:6]}"  # a DAG id of this module's own for written-in runs
API_SERVER_PID_FILE = ROOT / ".blobgc" / "pids" / "airflow-api-server.pid"  # scripts/stack.py's PIDS
RESTORE_TIMEOUT = 180


def quoted(dag_id: str, run_id: str) -> str:
    return f"{quote(dag_id, safe='')}/{quote(run_id, safe='')}"


def request(path: str, *, method: str = "GET", token: str | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    all_headers = {**({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
    req = urllib.request.Request(AIRFLOW_API + path, method=method, headers=all_headers,
                                 data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.fixture(scope="module")
def stack_db(stack):
    with psycopg.connect(stack["BLOBGC_PG_DSN"], autocommit=True) as conn:
        yield conn


def delete_runs(conn, dag_id: str, run_ids: list[str]) -> None:
    """Every trace of these runs in blobgc's tables (the stack's database)."""
    with conn.transaction():
        ids = {"dag": dag_id, "runs": run_ids}
        logs = "(SELECT id FROM blobgc.deletion_log WHERE dag_id = %(dag)s AND run_id = ANY(%(runs)s))"
        conn.execute(f"DELETE FROM blobgc.deletion_settlement WHERE log_id IN {logs}", ids)
        conn.execute(f"DELETE FROM blobgc.outbox WHERE log_id IN {logs}", ids)
        for table in ("quarantine", "run_bucket", "deletion_log", "plan_outcome", "gate_decision", "run_part", "run_collection", "undo_request",
                      "run"):
            conn.execute(f"DELETE FROM blobgc.{table} WHERE dag_id = %(dag)s AND run_id = ANY(%(runs)s)", ids)
        conn.execute("DELETE FROM blobgc.plan_item WHERE dag_id = %(dag)s AND run_id = ANY(%(runs)s)", ids)


@pytest.fixture(scope="module")
def written_runs(stack_db):
    """A real run (keys deleted, owed, absent; a plan of its own with a skipped item; a gate decision) and a dry
    run with a plan, of DAG `DAG`; and an older dry run with only a dry deletion log."""
    conn = stack_db
    real, dry, old_dry = "manual__real_1", "manual__dry_1", "manual__old_dry_1"
    with conn.transaction():
        conn.execute(
            "INSERT INTO blobgc.run (dag_id, run_id, dry_run, started_at, finished_at, rows_deleted, objects_deleted, "
            "bytes_reclaimed, plan_run_id) VALUES "
            "(%(dag)s, %(dry)s, true, now() - interval '2 hours', now() - interval '2 hours', 3, 6, 3221225472, %(dry)s),"
            "(%(dag)s, %(real)s, false, now() - interval '1 hour', now() - interval '1 hour', 2, 3, 2147483648, %(dry)s),"
            "(%(dag)s, %(old)s, true, now() - interval '3 hours', now() - interval '3 hours', 0, 2, 20, NULL)",
            {"dag": DAG, "real": real, "dry": dry, "old": old_dry})
        conn.execute("INSERT INTO blobgc.run_collection (dag_id, run_id, collection, rows_deleted, objects_deleted, "
                     "bytes_reclaimed) VALUES (%s, %s, 'app_blob', 2, 3, 2147483648)", (DAG, real))
        item_ids = [conn.execute(
            "INSERT INTO blobgc.plan_item (dag_id, run_id, source, bucket, row_ids, keys, sizes, bytes, collection) "
            "VALUES (%s, %s, 'app.blob', 'blobgc', %s, %s, %s, %s, 'app_blob') RETURNING id",
            (DAG, dry, rows, keys, sizes, sum(sizes))).fetchone()[0] for rows, keys, sizes in (
            (["a", "b"], ["blobs/a/raw", "blobs/a/thumbnail", "blobs/b/raw", "blobs/b/thumbnail"],
             [1073741824, 10, 1073741814, 0]),
            (["c"], ["blobs/c/raw", "media/c.jpg"], [1073741824, 0]))]
        conn.execute("INSERT INTO blobgc.plan_outcome (dag_id, run_id, item_id, rows_deleted, objects_owed, "
                     "skipped_ids, skipped_keys) VALUES (%s, %s, %s, 2, 4, '{}', '{}'), "
                     "(%s, %s, %s, 0, 0, '{c}', '{blobs/c/raw}')", (DAG, real, item_ids[0], DAG, real, item_ids[1]))
        conn.execute("INSERT INTO blobgc.gate_decision (dag_id, run_id, plan_run_id, planned_rows, planned_objects, "
                     "planned_bytes, judgement, decision, decided_by, decided_at) VALUES (%s, %s, %s, 3, 6, "
                     "3221225472, %s, 'approved', 'admin', now())",
                     (DAG, real, dry, json.dumps({
                         "plan_run_id": dry, "needs_approval": True,
                         "settings": {"ratio": 5, "min_objects": 1000, "min_bytes": 1073741824, "history": 10},
                         "scopes": [{"scope": "(all)", "planned_objects": 6, "planned_bytes": 3221225472,
                                     "planned_rows": 3, "history_runs": 4, "median_objects": 1, "median_bytes": 1024,
                                     "threshold_objects": 1000, "threshold_bytes": 1073741824, "exceeds": True}]})))
        log_id = conn.execute(
            "INSERT INTO blobgc.deletion_log (dag_id, run_id, source, bucket, keys, sizes) VALUES (%s, %s, 'app.blob', "
            "'blobgc', '{blobs/a/raw,blobs/a/thumbnail,blobs/b/raw,blobs/b/thumbnail}', '{1073741824,10,1073741814,0}')"
            " RETURNING id", (DAG, real)).fetchone()[0]
        conn.execute("INSERT INTO blobgc.deletion_settlement (log_id, run_id, keys, outcome, version_ids) VALUES "
                     "(%s, %s, '{blobs/a/raw,blobs/a/thumbnail,blobs/b/raw}', 'deleted', NULL), "
                     "(%s, %s, '{blobs/b/thumbnail}', 'absent', NULL)", (log_id, real, log_id, real))
        log_2 = conn.execute(
            "INSERT INTO blobgc.deletion_log (dag_id, run_id, source, bucket, keys, sizes) VALUES (%s, %s, 'app.blob', "
            "'blobgc', '{media/owed.jpg}', '{7}') RETURNING id", (DAG, real)).fetchone()[0]
        conn.execute("INSERT INTO blobgc.outbox (log_id, dag_id, bucket, keys, sizes, parked_at) "
                     "VALUES (%s, %s, 'blobgc', NULL, NULL, now())", (log_2, DAG))
        conn.execute("INSERT INTO blobgc.deletion_log (dag_id, run_id, dry_run, source, bucket, keys, sizes) VALUES "
                     "(%s, %s, true, 'app.blob', 'blobgc', '{pastes/x,pastes/y}', '{10,10}')", (DAG, old_dry))
    yield {"real": real, "dry": dry, "old_dry": old_dry}
    delete_runs(conn, DAG, [real, dry, old_dry])


def data_values(body: str, table: str) -> dict[str, str]:
    """data-field -> data-value of the rows of a receipt's table."""
    section = body.split(f'<table id="{table}"', 1)[1].split("</table>", 1)[0]
    return dict(re.findall(r'data-field="([^"]+)" data-value="([^"]*)"', section))


def test_receipt_page_shows_counts_gate_bytes_by_prefix_and_cost(stack, written_runs):
    token = airflow_token()
    status, headers, body = request(f"/blobgc/runs/{quoted(DAG, written_runs['real'])}", token=token)
    assert status == 200 and headers["cache-control"] == "no-store"
    page = body.decode()
    run = data_values(page, "run")
    assert (run["rows_deleted"], run["objects_deleted"], run["bytes_reclaimed"]) == ("2", "3", "2147483648")
    assert run["dry_run"] == "false" and run["plan_run_id"] == written_runs["dry"]
    assert float(run["usd_per_month_saved"]) == pytest.approx(2 * 0.023)  # 2 GiB at S3 Standard
    assert "$0.05</b> per month" in page
    assert f'href="/blobgc/runs/{quoted(DAG, written_runs["dry"])}"' in page  # the plan's own receipt
    counts = dict(re.findall(r'data-count="(\w+)" data-value="([^"]*)"', page))
    # planned = deleted + absent + kept (c's two keys, skipped with row c) + failed; media/owed.jpg is outside the plan
    assert counts == {"planned": "6", "deleted": "3", "absent": "1", "kept": "2", "failed": "0"}
    assert "rows: planned 3 = deleted 2 + skipped 1" in page and "not in its plan" in page
    assert 'data-decision="approved"' in page
    assert '<tr data-scope="(all)" data-exceeds="true">' in page and "3.0 GiB" in page
    prefixes = re.findall(r'data-prefix="([^"]+)" data-objects="(\d+)" data-bytes="(\d+)"', page)
    assert prefixes == [("blobs/", "4", "2147483648"), ("media/", "1", "7")]
    statuses = dict(re.findall(r'data-status="(\w+)" data-objects="(\d+)"', page))
    assert statuses == {"absent": "1", "deleted": "3", "owed": "1"}
    assert page.count('<tr data-key="') == 5
    assert 'href="/blobgc/api/runs/' in page and "manifest.csv" in page and "manifest.json" in page
    # deletions without version ids (bucket not versioned): no button, and the page says why
    assert 'id="undo-button"' not in page and "left no version ids" in page

    status, _, body = request(f"/blobgc/runs/{quoted(DAG, written_runs['dry'])}", token=token)
    assert status == 200 and 'data-kind="dry"' in body.decode()
    assert re.findall(r'data-status="(\w+)" data-objects="(\d+)"', body.decode()) == [("planned", "6")]

    status, headers, body = request(f"/blobgc/runs/{DAG}/no_such_run", token=token)
    assert status == 404 and b"No such run" in body and headers["cache-control"] == "no-store"
    status, _, _ = request(f"/blobgc/runs/{quoted(DAG, written_runs['real'])}")
    assert status == 401


def manifest(path: str, fmt: str, token: str) -> tuple[dict[str, str], list[dict]]:
    status, headers, body = request(f"/blobgc/api/runs/{path}/manifest.{fmt}", token=token)
    assert status == 200, body[:500]
    if fmt == "json":
        return headers, json.loads(body)
    return headers, list(csv.DictReader(io.StringIO(body.decode())))


def test_manifests_list_exactly_the_runs_keys_with_statuses(stack, written_runs):
    token = airflow_token()
    real = quoted(DAG, written_runs["real"])
    headers, rows = manifest(real, "csv", token)
    assert headers["content-type"].startswith("text/csv")
    assert headers["content-disposition"] == f'attachment; filename="blobgc_manifest__{DAG}__manual__real_1.csv"'
    want = {"blobs/a/raw": "deleted", "blobs/a/thumbnail": "deleted", "blobs/b/raw": "deleted",
            "blobs/b/thumbnail": "absent", "media/owed.jpg": "owed"}
    assert {r["key"]: r["status"] for r in rows} == want and len(rows) == 5
    assert {r["bucket"] for r in rows} == {"blobgc"}
    assert all(r["deleted_at"] for r in rows if r["status"] == "deleted")

    headers, items = manifest(real, "json", token)
    assert headers["content-type"] == "application/json" and "manifest__" in headers["content-disposition"]
    assert {i["key"]: i["status"] for i in items} == want
    assert next(i for i in items if i["key"] == "blobs/a/raw")["size_bytes"] == 1073741824

    _, dry = manifest(quoted(DAG, written_runs["dry"]), "json", token)  # a dry run: its plan
    assert sorted((i["key"], i["status"]) for i in dry) == sorted(
        (k, "planned") for k in ("blobs/a/raw", "blobs/a/thumbnail", "blobs/b/raw", "blobs/b/thumbnail",
                                 "blobs/c/raw", "media/c.jpg"))
    _, old = manifest(quoted(DAG, written_runs["old_dry"]), "csv", token)  # before plans: its dry log
    assert sorted((r["key"], r["status"]) for r in old) == [("pastes/x", "planned"), ("pastes/y", "planned")]

    assert request(f"/blobgc/api/runs/{DAG}/nope/manifest.json", token=token)[0] == 404
    assert request(f"/blobgc/api/runs/{real}/manifest.xml", token=token)[0] in (404, 422)
    assert request(f"/blobgc/api/runs/{real}/manifest.csv")[0] == 401


# ------------------------------------------------------------------------------------------ constant memory
def serving_rss_kib(pid: int) -> int:
    """VmRSS of the api-server and its children (uvicorn workers, if any): the processes that serve requests."""
    total = 0
    for p in [pid, *child_pids(pid)]:
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except FileNotFoundError:
            continue
        total += int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1))
    return total


def child_pids(pid: int) -> list[int]:
    """Every descendant of `pid`, from /proc/<n>/stat's parent pid."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        frontier = [p for p, parent in parents.items() if parent in frontier]
        found += frontier
    return found


@pytest.fixture(scope="module")
def big_run(stack_db):
    """A real run of 100,000 deleted keys (100 log rows of 1,000), written straight into the stack's database."""
    run_id = "manual__big_100k"
    with stack_db.transaction():
        stack_db.execute("INSERT INTO blobgc.run (dag_id, run_id, dry_run, finished_at, objects_deleted, "
                         "bytes_reclaimed) VALUES (%s, %s, false, now(), 100000, 100000000)", (DAG, run_id))
        stack_db.execute(
            "WITH logs AS (INSERT INTO blobgc.deletion_log (dag_id, run_id, source, bucket, keys, sizes) "
            "SELECT %(dag)s, %(run)s, 'app.blob', 'blobgc', "
            "       ARRAY(SELECT format('blobs/big-%%s-%%s/raw', b, i) FROM generate_series(1, 1000) i), "
            "       array_fill(1000::bigint, ARRAY[1000]) FROM generate_series(1, 100) b RETURNING id, keys) "
            "INSERT INTO blobgc.deletion_settlement (log_id, run_id, keys, outcome, version_ids) "
            "SELECT id, %(run)s, keys, 'deleted', ARRAY(SELECT md5(k) FROM unnest(keys) k) FROM logs",
            {"dag": DAG, "run": run_id})
    yield run_id
    delete_runs(stack_db, DAG, [run_id])


def test_a_100k_key_manifest_streams_with_the_api_servers_memory_flat(stack, written_runs, big_run):
    pid = int(API_SERVER_PID_FILE.read_text())
    token = airflow_token()
    path = f"/blobgc/api/runs/{quoted(DAG, big_run)}/manifest.csv"
    request(f"/blobgc/api/runs/{quoted(DAG, written_runs['real'])}/manifest.csv", token=token)  # warm the code path
    before = serving_rss_kib(pid)
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(serving_rss_kib(pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    lines = 0
    received = 0
    started = time.monotonic()
    try:
        req = urllib.request.Request(AIRFLOW_API + path, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=120) as r:
            tail = b""
            while chunk := r.read(64 * 1024):
                received += len(chunk)
                lines += chunk.count(b"\n")
                tail = chunk[-200:]
                samples.append(serving_rss_kib(pid))
    finally:
        stop.set()
        sampler.join()
    elapsed = time.monotonic() - started
    after = serving_rss_kib(pid)
    peak = max(samples + [after])
    print(f"\n100k-key manifest.csv: {received / 1e6:.1f} MB in {elapsed:.1f} s; api-server RSS before "
          f"{before / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB (+{(peak - before) / 1024:.1f}), after "
          f"{after / 1024:.1f} MiB (+{(after - before) / 1024:.1f}); {len(samples)} samples")
    assert lines == 100_001  # the header and every key
    assert tail.endswith(b"\r\n") and b"deleted" in tail
    assert (peak - before) < 30 * 1024, f"the api-server grew {(peak - before) / 1024:.1f} MiB streaming 100k keys"


def test_an_abandoned_download_frees_its_database_connection(stack, stack_db, big_run):
    """A client that reads the start of a 100k-key manifest and hangs up: the server-side cursor and its
    connection are gone at once, not when the generator would have run out."""
    token = airflow_token()
    query = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
             "AND query LIKE '%%blobgc_manifest%%' AND pid <> pg_backend_pid()")
    client = http.client.HTTPConnection(urlsplit(AIRFLOW_API).netloc, timeout=60)
    client.connect()
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a slow reader: the server must wait
    client.request("GET", f"/blobgc/api/runs/{quoted(DAG, big_run)}/manifest.json",
                   headers={"Authorization": f"Bearer {token}"})
    response = client.getresponse()
    assert response.status == 200 and response.read(64 * 1024).startswith(b"[")
    deadline = time.monotonic() + 10
    while stack_db.execute(query).fetchone()[0] != 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stack_db.execute(query).fetchone()[0] == 1  # mid-download: the server-side cursor is open
    client.close()  # hang up
    hung_up = time.monotonic()
    while stack_db.execute(query).fetchone()[0] and time.monotonic() < hung_up + 20:
        time.sleep(0.05)
    assert stack_db.execute(query).fetchone()[0] == 0, "the hung-up download still holds its connection"
    print(f"\nmanifest connection closed {time.monotonic() - hung_up:.2f} s after the client hung up")


# ------------------------------------------------------------------------------------------ undo
@pytest.fixture
def swept(stack_db, s3, versioned_bucket):
    """A real blobgc_sweep run in the stack's database that deleted 2 blobs (4 objects) from a versioned bucket."""
    bucket = versioned_bucket
    run_id = f"manual__receipt_{uuid.uuid4().hex[:8]}"
    run, kept, garbage = swept_run(stack_db, s3, bucket, run_id, n=3, keep=1)
    yield {"run": run, "bucket": bucket, "garbage": garbage, "s3": s3}
    forget_swept_run(stack_db, run)


def forget_swept_run(conn, run) -> None:
    """Every trace of a `swept_run` in the stack's database: the run, the restores of it, its blobs."""
    restores = [r[0] for r in conn.execute("SELECT restore_run_id FROM blobgc.undo_request WHERE run_id = %s",
                                           (run.run_id,))]
    delete_runs(conn, run.dag_id, [run.run_id])
    delete_runs(conn, "blobgc_restore", restores)
    with conn.transaction():
        conn.execute("DELETE FROM blobgc.restore_item WHERE source_run_id = %s", (run.run_id,))
        conn.execute("DELETE FROM app.blob_attachment WHERE post_id = %s", (f"post-{run.run_id}",))
        conn.execute("DELETE FROM app.post WHERE id = %s", (f"post-{run.run_id}",))
        conn.execute("DELETE FROM app.blob WHERE id LIKE %s", (f"{run.run_id}-%",))


def restore_runs() -> list[str]:
    return [r["dag_run_id"] for r in airflow_api("/api/v2/dags/blobgc_restore/dagRuns?limit=100")["dag_runs"]]


def test_undo_is_refused_to_a_viewer_and_to_forged_requests(stack, stack_db, swept, written_runs):
    run = swept["run"]
    receipt = f"/blobgc/runs/{quoted(run.dag_id, run.run_id)}"
    undo = f"/blobgc/api/runs/{quoted(run.dag_id, run.run_id)}/undo"
    admin, viewer = airflow_token(), airflow_token("viewer", "viewer")
    before = restore_runs()

    status, _, body = request(receipt, token=viewer)
    assert status == 200 and 'id="undo-button"' not in body.decode()
    assert "needs permission to trigger blobgc_restore" in body.decode()
    status, _, body = request(receipt, token=admin)
    assert status == 200 and 'id="undo-button"' in body.decode()  # the same run: undoable, by admin

    header = {"X-Blobgc-Action": "undo"}
    status, _, body = request(undo, method="POST", token=viewer, headers=header)
    assert status == 403 and b"may not trigger blobgc_restore" in body
    status, _, body = request(undo, method="POST", token=admin)  # no custom header: a cross-site form's POST
    assert status == 403 and b"X-Blobgc-Action" in body
    status, _, body = request(undo, method="POST", token=admin, headers={**header, "Origin": "https://evil.example"})
    assert status == 403 and b"cross-origin" in body
    status, _, body = request(f"/blobgc/api/runs/{quoted(DAG, written_runs['dry'])}/undo", method="POST",
                              token=admin, headers=header)
    assert status == 409 and b"dry run" in body
    status, _, body = request(f"/blobgc/api/runs/{quoted(DAG, written_runs['real'])}/undo", method="POST",
                              token=admin, headers=header)
    assert status == 409 and b"not versioned" in body

    assert restore_runs() == before  # nothing was triggered
    assert stack_db.execute("SELECT count(*) FROM blobgc.undo_request WHERE run_id = %s",
                            (run.run_id,)).fetchone()[0] == 0


def wait_for_restore(restore_run_id: str) -> None:
    """Wait for the scheduler to finish a blobgc_restore run; it must succeed."""
    deadline, state = time.monotonic() + RESTORE_TIMEOUT, None
    while time.monotonic() < deadline:
        state = airflow_api(f"/api/v2/dags/blobgc_restore/dagRuns/{quote(restore_run_id, safe='')}")["state"]
        if state in ("success", "failed"):
            break
        time.sleep(2)
    assert state == "success", f"blobgc_restore run {restore_run_id} ended {state}"


@pytest.fixture
def quarantined_sweep(stack_db, s3, bucket):
    """A real blobgc_sweep run in the stack's database whose 2 blobs (4 objects) went into 7 days of quarantine in an
    unversioned bucket."""
    run_id = f"manual__receipt_q_{uuid.uuid4().hex[:8]}"
    run, _, garbage = swept_run(stack_db, s3, bucket, run_id, n=3, keep=1, quarantine=QuarantinePolicy({bucket: 7}))
    yield {"run": run, "bucket": bucket, "garbage": garbage}
    forget_swept_run(stack_db, run)


def test_undo_from_the_receipts_rest_call_brings_back_a_quarantined_run_on_an_unversioned_bucket(
        stack, stack_db, s3, quarantined_sweep, restore_to_this_test):
    """Issue 32: undo works on an unversioned bucket within the quarantine window: the receipt's REST call triggers
    blobgc_restore, which copies every object back byte for byte and puts the rows back; a key the application
    wrote again meanwhile is refused by name and keeps its new bytes."""
    run, bucket, garbage = quarantined_sweep["run"], quarantined_sweep["bucket"], quarantined_sweep["garbage"]
    keys = sorted(k for blob_id in garbage for k in (f"blobs/{blob_id}/raw", f"blobs/{blob_id}/thumbnail"))
    rewritten = keys[0]
    s3.put_object(Bucket=bucket, Key=rewritten, Body=b"written again")
    admin = airflow_token()
    status, _, body = request(f"/blobgc/runs/{quoted(run.dag_id, run.run_id)}", token=admin)
    page = body.decode()
    assert status == 200 and 'id="undo-button"' in page
    assert 'id="quarantine"' in page and "4 objects (220 B) went into quarantine for 7 days" in page

    was_paused = airflow_api("/api/v2/dags/blobgc_restore")["is_paused"]
    airflow_api("/api/v2/dags/blobgc_restore", method="PATCH", body={"is_paused": False})
    try:
        status, _, body = request(f"/blobgc/api/runs/{quoted(run.dag_id, run.run_id)}/undo", method="POST",
                                  token=admin, headers={"X-Blobgc-Action": "undo"})
        assert status == 201, body
        restore_run_id = json.loads(body)["restore_run_id"]
        wait_for_restore(restore_run_id)
    finally:
        airflow_api("/api/v2/dags/blobgc_restore", method="PATCH", body={"is_paused": was_paused})

    for key in keys[1:]:  # byte for byte
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert body == (b"r" * 100 if key.endswith("/raw") else b"t" * 10)
    assert s3.get_object(Bucket=bucket, Key=rewritten)["Body"].read() == b"written again"
    items = {item: (outcome, detail) for item, outcome, detail in stack_db.execute(
        "SELECT item, outcome, detail FROM blobgc.restore_item WHERE restore_run_id = %s AND kind = 'object'",
        (restore_run_id,))}
    assert {k: o for k, (o, _) in items.items()} == {k: "not_restored" if k == rewritten else "restored" for k in keys}
    assert items[rewritten][1].startswith(f"{rewritten} was written again since it was deleted")
    back = {r[0] for r in stack_db.execute("SELECT id FROM app.blob WHERE id = ANY(%s)", (garbage,))}
    assert back == set(garbage)


def sign_in_if_asked(page, user: str = "admin", password: str = "admin") -> None:
    if "/auth/login" in page.url:
        page.get_by_label("Username").fill(user)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()


@pytest.fixture
def restore_to_this_test():
    """blobgc_restore is unpaused for the scheduler here: no other test worker runs it meanwhile."""
    with dag_lock("blobgc_restore"):
        yield


def test_undo_from_the_receipt_in_chromium_restores_the_runs_objects(stack, stack_db, swept, chromium,
                                                                      restore_to_this_test):
    run, s3, bucket = swept["run"], swept["s3"], swept["bucket"]
    keys = [k for blob_id in swept["garbage"] for k in (f"blobs/{blob_id}/raw", f"blobs/{blob_id}/thumbnail")]
    for key in keys:
        with pytest.raises(s3.exceptions.ClientError):
            s3.head_object(Bucket=bucket, Key=key)
    was_paused = airflow_api("/api/v2/dags/blobgc_restore")["is_paused"]
    if not was_paused:
        airflow_api("/api/v2/dags/blobgc_restore", method="PATCH", body={"is_paused": True})
    receipt = f"{AIRFLOW_API}/blobgc/runs/{quoted(run.dag_id, run.run_id)}"
    page = chromium.new_page()
    try:
        page.goto(receipt)
        sign_in_if_asked(page)
        page.wait_for_url(receipt)
        assert page.locator("#restore-paused").is_visible()  # the restore would wait: the page says so
        page.on("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Undo this run").click()
        result = page.locator("#undo-result")
        result.filter(has_text="triggered").wait_for(timeout=30_000)
        restore_run_id = result.get_attribute("data-restore-run-id")
        assert restore_run_id and restore_run_id.startswith("undo__")
        assert stack_db.execute("SELECT requested_by FROM blobgc.undo_request WHERE run_id = %s AND restore_run_id = %s",
                                (run.run_id, restore_run_id)).fetchone()[0] == "admin"
        triggered = airflow_api(f"/api/v2/dags/blobgc_restore/dagRuns/{restore_run_id}")
        assert triggered["conf"] == {"run_id": run.run_id, "source_dag_id": "blobgc_sweep"}
        assert triggered["note"] == "Undo from receipt by admin"

        airflow_api("/api/v2/dags/blobgc_restore", method="PATCH", body={"is_paused": False})
        wait_for_restore(restore_run_id)
    finally:
        airflow_api("/api/v2/dags/blobgc_restore", method="PATCH", body={"is_paused": was_paused})

    for key in keys:  # every deleted object is back
        s3.head_object(Bucket=bucket, Key=key)
    page.reload()
    outcome = page.locator('#restore-items tr[data-kind="object"][data-outcome="restored"]')
    assert outcome.get_attribute("data-items") == str(len(keys))
    assert page.locator(f'#undo-requests tr[data-restore-run="{restore_run_id}"]').get_attribute(
        "data-state") == "success"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "receipt_page.png"
    page.screenshot(path=str(screenshot), full_page=True)
    if os.environ.get("BLOBGC_WRITE_SCREENSHOTS") == "1":  # the README's picture, refreshed only when asked for
        shutil.copyfile(screenshot, ROOT / "docs" / "images" / "receipt_page.png")

    # The reclaim page lists the run with a link to this receipt, and its chart shows dollars on request.
    page.goto(f"{AIRFLOW_API}/blobgc/reclaim?days=7")
    row = page.locator(f'table#recent-runs tr[data-run-id="{run.run_id}"]')
    row.locator("a.receipt").click()
    page.wait_for_url(receipt)
    page.go_back()
    assert page.locator(".panel-bytes svg.chart").is_visible() and not page.locator(".panel-usd svg").is_visible()
    page.get_by_text("dollars (monthly cost saved)").click()
    assert page.locator(".panel-usd svg.chart").is_visible() and not page.locator(".panel-bytes svg").is_visible()
    page.close()
    chromium.clear_cookies()  # the next test signs in afresh
    assert os.path.getsize(screenshot) > 10_000
