"""Helpers for the tests that are not fixtures: data makers, the local S3 server's drills, and two ways to run
Airflow: `run_dag` (a DAG run in this process, as `airflow dags test` does it) and `airflow` (the CLI itself)."""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from blobgc.kinds.blobs.layouts import blob_keys

ROOT = Path(__file__).resolve().parents[1]


NOW = datetime.now(timezone.utc)  # when the tests started: data is made old relative to it, never the clock moved
FAR_FUTURE = datetime(2030, 1, 1, tzinfo=timezone.utc)  # a mistyped logical date, years ahead
# A session of its own may use another test database; each pytest-xdist worker (`make test` runs three) has its own.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
TEST_DB = os.environ.get("BLOBGC_TEST_DB", "blobgc_test") + (f"_{WORKER}" if WORKER else "")


def make_blobs(conn, s3, bucket: str, n: int, *, prefix: str = "b", size: int = 100,
               thumbnails: bool = True) -> list[str]:
    """Create `n` blobs the way the application does: objects first (in parallel), then the rows."""
    ids = [f"{prefix}{i:06d}" for i in range(n)]

    def put(blob_id: str) -> None:
        raw, thumb = blob_keys(blob_id)
        s3.put_object(Bucket=bucket, Key=raw, Body=b"r" * size)
        if thumbnails:
            s3.put_object(Bucket=bucket, Key=thumb, Body=b"t" * 10)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, ids))
    with conn.transaction():
        conn.execute(
            "INSERT INTO app.blob (id, filename, mimetype, size_bytes) "
            "SELECT id, id || '.bin', 'application/octet-stream', %(size)s FROM unnest(%(ids)s::text[]) id",
            {"ids": ids, "size": size},
        )
    return ids


def set_unused_since(conn, ids: list[str], age: str) -> None:
    """As if an earlier mark found these blobs unused `age` ago."""
    with conn.transaction():
        conn.execute("UPDATE app.blob SET unused = true, updated_at = now() - %(age)s::interval, "
                     "created_at = least(created_at, now() - %(age)s::interval) "
                     "WHERE id = ANY(%(ids)s::text[])", {"ids": ids, "age": age})


def object_keys(s3, bucket: str) -> set[str]:
    return {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])}


def cached_keys(redis, prefix: str) -> set[str]:
    return {k.decode() for k in redis.scan_iter(match=f"{prefix}*", count=1000)}


def airflow(*args: str, env_extra: dict[str, str] | None = None, timeout: int = 300,
            whole_dags_folder: bool = False) -> subprocess.CompletedProcess:
    """The `airflow` CLI against the stack, in a process of its own. `dags test <dag_id>` parses only
    dags/<dag_id>.py (`-f`), which starts in about 6 s instead of 20 to 27 s for the whole folder, unless
    `whole_dags_folder`. Tests of a DAG's behaviour use `run_dag`; this is for the CLI itself."""
    env = dict(os.environ)
    env.update(env_extra or {})
    argv = list(args)
    dag_test = argv[:2] == ["dags", "test"]
    if dag_test and not whole_dags_folder and "-f" not in argv:
        argv += ["-f", str(ROOT / "dags" / f"{argv[2]}.py")]
    with dag_lock(argv[2]) if dag_test else contextlib.nullcontext():
        return subprocess.run(["airflow", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


_held: dict[str, tuple[Any, int]] = {}
LOCK_WAITS = {"seconds": 0.0}  # how long this worker waited for the locks below (the test timeline reports it)


@contextlib.contextmanager
def dag_lock(dag_id: str, *, shared: bool = False) -> Iterator[None]:
    """A DAG's lock among the pytest-xdist workers, which share the stack's metadata database. In-process runs of
    one DAG may overlap (`shared`): each has its own run id and test database. A test takes it alone while it has
    the DAG unpaused for the stack's scheduler (which would run another worker's run, or have it paused under
    it), and so does a run dated by hand (`DAG.test()` clears the DAG's runs of its date) or writing the DAG's next
    version (`dag_lock(f"{dag_id}.sync")`). A lock file each, held again freely (in any mode) by the same process."""
    handle, depth = _held.get(dag_id, (None, 0))
    if handle is None:
        handle = open(Path(tempfile.gettempdir()) / f"blobgc-tests-{dag_id}.lock", "w")  # noqa: SIM115
        waiting = time.monotonic()
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        LOCK_WAITS["seconds"] += time.monotonic() - waiting
    _held[dag_id] = (handle, depth + 1)
    try:
        yield
    finally:
        handle, depth = _held.pop(dag_id)
        if depth > 1:
            _held[dag_id] = (handle, depth - 1)
        else:
            handle.close()  # closing the file releases the lock


@contextlib.contextmanager
def locks_at_once(names: list[str], poll: float = 0.2) -> Iterator[Callable[[str], None]]:
    """DAGs' (or other shared things') locks, each alone, taken at once or none: while one is busy, every one taken
    is let go and it tries again, so that waiting never holds a lock that another worker's test waits for. Yields
    `let_go(name)`, to let one go before the others (each is let go at the end anyway)."""
    assert not any(name in _held for name in names), "locks_at_once inside one of its locks"
    waiting = time.monotonic()
    while True:
        handles = []
        for name in names:
            handle = open(Path(tempfile.gettempdir()) / f"blobgc-tests-{name}.lock", "w")  # noqa: SIM115
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                break
            handles.append(handle)
        if len(handles) == len(names):
            break
        for handle in handles:
            handle.close()
        time.sleep(poll)
    LOCK_WAITS["seconds"] += time.monotonic() - waiting
    _held.update({name: (handle, 1) for name, handle in zip(names, handles, strict=True)})

    def let_go(name: str) -> None:
        if name in _held:
            assert _held[name][1] == 1, f"let_go({name!r}) inside a dag_lock of it"
            _held.pop(name)[0].close()

    try:
        yield let_go
    finally:
        for name in names:
            let_go(name)


@contextlib.contextmanager
def every_dag_alone(poll: float = 0.2) -> Iterator[None]:
    """Every DAG's lock, alone, taken at once (`locks_at_once`): for a test that takes away for a while what every
    run needs, such as one of the stack's pools."""
    with locks_at_once(sorted(path.stem for path in (ROOT / "dags").glob("*.py")), poll):
        yield


@dataclass(frozen=True)
class DagTestRun:
    """What `run_dag` saw: `returncode` as `airflow dags test` would exit, everything printed (`output`), the
    run's id and state, the final state of each task instance (`task_states`, "task_id" or "task_id[i]"), and
    the exception that ended the run before any task ran (`error`: a Param refused, say), for a test to check
    its class and message rather than any failure."""

    returncode: int
    output: str
    run_id: str | None
    state: str | None
    task_states: dict[str, str | None] = field(default_factory=dict)
    error: Exception | None = None

    @property
    def stdout(self) -> str:  # the CLI's names, so a test reads the same whichever runner it uses
        return self.output

    stderr = ""


@contextlib.contextmanager
def _environment(extra: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _everything_printed() -> Iterator[dict[str, str]]:
    """What is written to file descriptors 1 and 2, and to sys.stdout/stderr, inside the block."""
    printed: dict[str, str] = {}
    with tempfile.TemporaryFile() as sink:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        text = open(sink.fileno(), "w", buffering=1, closefd=False, encoding="utf-8", errors="replace")  # noqa: SIM115
        # Records of the standard library's logging too: a log renderer set up earlier may hold another stream
        # (pytest's capture) than the one the CLI would print to.
        records = logging.StreamHandler(text)
        records.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(records)
        try:
            with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
                yield printed
        finally:
            logging.getLogger().removeHandler(records)
            text.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sink.seek(0)
            printed["output"] = sink.read().decode("utf-8", "replace")


def run_dag(dag_id: str, *, conf: dict[str, Any] | None = None, logical_date: datetime | None = None,
            env_extra: dict[str, str] | None = None) -> DagTestRun:
    """One run of `dag_id`, as `airflow dags test dag_id [logical_date] -c conf` makes it, in this process.

    The CLI spends 6 to 15 s starting Airflow; this spends it once per test session. The DAG file is parsed
    afresh with `env_extra` set (Variables as AIRFLOW_VAR_*, BLOBGC_TASK_RETRIES), then `DAG.test()` runs
    every task in this process through Airflow's own task runner, against the stack's metadata database, as
    the CLI does. An exception (a Param refused, say) ends the run with returncode 1 and its traceback in the
    output, as it ends the CLI, and is kept in `error`."""
    from airflow.dag_processing.dagbag import DagBag

    run_id = state = None
    task_states: dict[str, str | None] = {}
    error: Exception | None = None
    # a run writes its own DAG version whenever what it parsed differs (a deadline its environment declares, say),
    # not only 30 s after the last write ([core] min_serialized_dag_update_interval): another worker's run of the
    # same DAG a moment before would otherwise leave this run created from that run's version
    with _environment({"AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "0", **(env_extra or {})}), \
            _everything_printed() as printed:
        try:
            bag = DagBag(dag_folder=str(ROOT / "dags" / f"{dag_id}.py"))
            if dag_id not in bag.dags:
                raise RuntimeError(f"{dag_id} did not parse: {bag.import_errors}")
            kwargs: dict[str, Any] = {"run_conf": conf}
            if logical_date is not None:
                kwargs["logical_date"] = logical_date
            with dag_lock(dag_id, shared=logical_date is None), _syncing_only(dag_id), _deadlocks_retried():
                _pause(dag_id)
                dag_run = bag.dags[dag_id].test(**kwargs)
                run_id, state = dag_run.run_id, str(dag_run.state)
                task_states = {ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]":
                               str(ti.state) if ti.state else None for ti in dag_run.get_task_instances()}
            returncode = 1 if state == "failed" else 0
            if returncode:
                print("DagRun failed")
        except Exception as caught:  # noqa: BLE001 - the CLI prints it and exits non-zero; so does this
            traceback.print_exc()
            returncode, error = 1, caught
    return DagTestRun(returncode, printed["output"], run_id, state, task_states, error)


@contextlib.contextmanager
def _deadlocks_retried() -> Iterator[None]:
    """The stack's scheduler brings the running runs of paused DAGs up to date once a minute
    (`_update_dag_run_state_for_paused_dags`), a `DAG.test()` run's among them: its `DagRun.update_state` and the
    run's own can lock the run's rows in opposite orders, and PostgreSQL ends one of them (deadlock detected; seen
    once in CI). The scheduler logs its loss and goes on; here `DAG.test()` would end the run half done. The run's
    own update is rolled back and made again, as the scheduler makes it again a minute later."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy.exc import OperationalError

    update_state = DagRun.update_state

    def again_after_deadlock(self: Any, *args: Any, session: Any = None, **kwargs: Any):
        if session is None:
            return update_state(self, *args, **kwargs)
        for attempt in range(5):
            try:
                result = update_state(self, *args, session=session, **kwargs)
                session.flush()
                return result
            except OperationalError as error:
                if getattr(error.orig, "pgcode", None) != "40P01" or attempt == 4:  # psycopg2's DeadlockDetected
                    raise
                session.rollback()
                time.sleep(0.2)

    DagRun.update_state = again_after_deadlock  # type: ignore[method-assign]
    try:
        yield
    finally:
        DagRun.update_state = update_state  # type: ignore[method-assign]


@contextlib.contextmanager
def _syncing_only(dag_id: str) -> Iterator[None]:
    """`DAG.test()` writes every DAG of the folder to the metadata database before each run (Airflow parses the
    whole bundle, for a TriggerDagRunOperator's targets: apache/airflow#64884), about 1.3 s a run here. No blobgc
    DAG triggers another, and the stack's dag-processor keeps the others current: this run writes its own."""
    import airflow.dag_processing.dagbag as dagbag

    whole_bundle, sync = dagbag.BundleDagBag, dagbag.sync_bag_to_db

    def this_file(*, dag_folder: str, **kwargs: Any):
        return whole_bundle(dag_folder=str(Path(dag_folder) / f"{dag_id}.py"), **kwargs)

    def one_writer(*args: Any, **kwargs: Any):
        with dag_lock(f"{dag_id}.sync"):
            return sync(*args, **kwargs)

    dagbag.BundleDagBag, dagbag.sync_bag_to_db = this_file, one_writer
    try:
        yield
    finally:
        dagbag.BundleDagBag, dagbag.sync_bag_to_db = whole_bundle, sync


def assert_param_refused(result: DagTestRun, message: str) -> None:
    """The run was refused by Airflow's Param validation with `message` (its first line) before it was created:
    not failed in some other way that merely prints the Param's name."""
    from airflow.sdk.exceptions import ParamValidationError

    assert result.returncode != 0 and result.run_id is None, result.output[-3000:]
    assert isinstance(result.error, ParamValidationError), result.output[-3000:]
    assert str(result.error).splitlines()[0] == message, str(result.error)


def _pause(dag_id: str) -> None:
    """The stack's scheduler must not also run this DAG's tasks (with the stack's connections, not the tests'):
    it leaves the runs of a paused DAG alone. DAGs start paused; a test that unpauses one pauses it again, and
    this makes sure of it even after an interrupted session."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        session.execute(update(DagModel).where(DagModel.dag_id == dag_id).values(is_paused=True))



def backend_waiting_on_lock(conn, query_fragment: str) -> bool:
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
        (f"%{query_fragment}%",),
    ).fetchone()[0] > 0


def ended_runs(runs: list[tuple[str, str]], timeout: float, poll: float = 3) -> dict[tuple[str, str], str]:
    """The states of these (dag_id, run_id) runs, as the stack's scheduler leaves them: once every one has ended
    (success or failed), or `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        states = {(dag_id, run_id): airflow_api(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
                  for dag_id, run_id in runs}
        if all(s in ("success", "failed") for s in states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(poll)


def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


AIRFLOW_API = f"http://127.0.0.1:{os.environ.get('BLOBGC_AIRFLOW_PORT', '8080')}"


def airflow_token(username: str = "admin", password: str = "admin") -> str:
    """A JWT from the running api-server, as a BI tool or script gets one."""
    request = urllib.request.Request(AIRFLOW_API + "/auth/token", method="POST",
                                     data=json.dumps({"username": username, "password": password}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.load(r)["access_token"]


def airflow_api(path: str, *, method: str = "GET", body: dict | None = None, token: str | None = None) -> dict:
    """A call to the running api-server's public REST API (/api/v2/...), as admin."""
    request = urllib.request.Request(
        AIRFLOW_API + path, method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token or airflow_token()}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.load(r)


def backdate_object(bucket: str, key: str, seconds: float) -> None:
    """Make an object old the honest way (docs/reference.md §1): the local S3 server moves its LastModified into the past."""
    query = urllib.parse.urlencode({"bucket": bucket, "key": key, "seconds": seconds})
    request = urllib.request.Request(f"{os.environ['BLOBGC_S3_ENDPOINT']}/_blobgc/backdate?{query}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200


def bulk_put(bucket: str, rows: list[tuple[str, int]], *, age_seconds: int = 0) -> None:
    """Objects of the given sizes, stored through the local S3 server's fixture loader (scripts/s3_server.py),
    written `age_seconds` ago (as the backdate call would date them)."""
    body = "\n".join(f"{key}\t{size}" for key, size in rows).encode()
    url = f"{os.environ['BLOBGC_S3_ENDPOINT']}/_blobgc/bulk-put?bucket={bucket}&age={age_seconds}"
    with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=120) as answer:
        assert int(answer.read()) == len(rows)


def backdate_objects(s3, bucket: str, seconds: float, prefix: str = "") -> list[str]:
    """Backdate every object under `prefix`; returns their keys."""
    keys = sorted(o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                  for o in page.get("Contents", []))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: backdate_object(bucket, key, seconds), keys))
    return keys


def s3_slowdown(bucket: str, count: int) -> int:
    """The local S3 server's throttling hook (docs/reference.md §1): the next `count` requests on `bucket` that
    delete, copy or HEAD an object answer 503 SlowDown (0 clears it). Returns the count the server holds."""
    query = urllib.parse.urlencode({"bucket": bucket, "count": count})
    request = urllib.request.Request(f"{os.environ['BLOBGC_S3_ENDPOINT']}/_blobgc/slowdown?{query}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
        return int(r.read())


def s3_outage(bucket: str, down: bool) -> None:
    """The local S3 server's outage drill: every request on `bucket` answers 503 while it is down."""
    request = urllib.request.Request(f"{os.environ['BLOBGC_S3_ENDPOINT']}/_blobgc/outage?bucket={bucket}",
                                     method="PUT" if down else "DELETE")
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200


def deny_deletes(s3, bucket: str, prefix: str) -> None:
    """A bucket policy under which the S3 server refuses DeleteObject for keys under `prefix`."""
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject",
                       "Resource": f"arn:aws:s3:::{bucket}/{prefix}*"}],
    }))
