"""The install test (issue 18): blobgc as a platform team adds it to an Airflow it already runs.

`scripts/install_venv.py` builds the wheel from this checkout and installs it into a virtualenv that held
only Airflow and the providers (from the pinned lock, cached under .blobgc/). That Airflow gets its own
metadata database, DAG folder and (empty) plugins folder, and is pointed at the local stack's PostgreSQL,
S3 and Redis through the usual connections. Nothing of the checkout is on its path: the DAGs come from
`python -m blobgc.dags install`, the plugin from the wheel's entry point, the SQL from package data.

Its application is not the demo's: a `shop` schema of the team's own, declared in a collections file.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from blobgc.core.clients import s3_client_from_env
from tests.helpers import ROOT, object_keys
from tests.support import install as support_install

pytestmark = pytest.mark.integration

INSTALL_HOME = ROOT / ".blobgc" / "install-airflow"  # the installed Airflow's AIRFLOW_HOME
METADATA_DB = "blobgc_install_airflow"  # the installed Airflow's own metadata database (kept between runs)
APP_DB = "blobgc_install_app"  # the team's application database (made anew for each run)
SHOP_SCHEMA = """
CREATE SCHEMA shop;
CREATE TABLE shop.upload (id bigint PRIMARY KEY, size_bytes bigint NOT NULL);
CREATE TABLE shop.post (id bigint PRIMARY KEY, cover_id bigint NULL REFERENCES shop.upload);
INSERT INTO shop.upload SELECT i, 10 * i FROM generate_series(1, 6) AS i;
INSERT INTO shop.post VALUES (1, 1), (2, 2), (3, NULL);
"""
REFERENCED, UNREFERENCED = [1, 2], [3, 4, 5, 6]


def database_dsn(dsn: str, dbname: str) -> str:
    return make_conninfo(**{**conninfo_to_dict(dsn), "dbname": dbname})


def url_of(dsn: str, dbname: str, scheme: str = "postgresql") -> str:
    parts = conninfo_to_dict(dsn)
    user = parts.get("user", "postgres")
    return f"{scheme}://{user}@{parts.get('host', '127.0.0.1')}:{parts.get('port', 5432)}/{dbname}"


@pytest.fixture(scope="module")
def installed_python(stack) -> Path:
    """The virtualenv's python, with this checkout's wheel freshly installed into it (built in the background
    since collection: tests/support/install.py)."""
    return support_install.installed_python()


@pytest.fixture(scope="module")
def install(stack, installed_python):
    """An Airflow of its own over the installed package: `run(*argv)` runs a command in its environment.

    Its home (and metadata database) is kept between runs, as a deployment's is; its DAG and plugins
    folders are emptied for each run."""
    home = INSTALL_HOME
    dags, plugins = home / "dags", home / "plugins"
    for folder in (dags, plugins):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    bucket = f"install-{uuid.uuid4().hex[:10]}"
    s3_client_from_env().create_bucket(Bucket=bucket)
    collections = home / "collections.yaml"
    collections.write_text(
        "collections:\n"
        "  uploads:\n"
        "    table: shop.upload\n"
        "    id: id\n"
        "    size: size_bytes\n"
        f"    bucket: {bucket}\n"
        "    keys: ['uploads/{id}/raw']\n"
        "    grace_hours: 0\n")
    dsn = stack["BLOBGC_PG_DSN"]
    with psycopg.connect(dsn, autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [METADATA_DB]).fetchone():
            admin.execute(f"CREATE DATABASE {METADATA_DB}")
        admin.execute(f"DROP DATABASE IF EXISTS {APP_DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {APP_DB}")
    with psycopg.connect(database_dsn(dsn, APP_DB), autocommit=True) as app:
        app.execute(SHOP_SCHEMA)

    bin_dir = installed_python.parent
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "BLOBGC", "PYTHON", "VIRTUAL_ENV"))}
    env = {
        **keep,
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url_of(dsn, METADATA_DB, "postgresql+psycopg2"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW_CONN_BLOBGC_S3": stack["AIRFLOW_CONN_BLOBGC_S3"],
        "AIRFLOW_CONN_BLOBGC_REDIS": stack["AIRFLOW_CONN_BLOBGC_REDIS"],
        "AIRFLOW_VAR_BLOBGC_BUCKET": bucket,
        "BLOBGC_COLLECTIONS": str(collections),
        "BLOBGC_TASK_RETRIES": "0",
    }

    def run(*argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), cwd=home, env=env, capture_output=True, text=True, timeout=timeout)

    def ok(*argv: str, timeout: int = 600) -> str:
        result = run(*argv, timeout=timeout)
        assert result.returncode == 0, f"{' '.join(argv)} failed:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
        return result.stdout

    # the README's "Install into an existing Airflow" steps, in order; blobgc_postgres is stored in the metadata
    # database, as `airflow connections add` does it (S3 and Redis come from the environment, as AIRFLOW_CONN_*)
    ok("airflow", "db", "migrate")
    run("airflow", "connections", "delete", "blobgc_postgres")
    ok("airflow", "connections", "add", "blobgc_postgres", "--conn-uri", url_of(dsn, APP_DB))
    ok("python", "-m", "blobgc.dags", "install", str(dags), "--collections")
    ok("python", "-m", "blobgc.migrate", "--conn-id", "blobgc_postgres")
    ok("airflow", "pools", "set", "blobgc_s3", "4", "S3 batch deletes (blobgc)")
    ok("airflow", "pools", "set", "blobgc_http", "4", "partner photo downloads (blobgc_crawler)")

    s3 = s3_client_from_env()
    for i in REFERENCED + UNREFERENCED:
        s3.put_object(Bucket=bucket, Key=f"uploads/{i}/raw", Body=b"x" * (10 * i))
    yield {"run": run, "ok": ok, "dags": dags, "bucket": bucket, "app_dsn": database_dsn(dsn, APP_DB), "s3": s3}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=item["Key"])
    s3.delete_bucket(Bucket=bucket)


def test_the_installed_package_comes_from_the_wheel_with_its_sql(install, installed_python):
    out = install["ok"]("python", "-c", "import blobgc, blobgc.core.queries as q; print(blobgc.__file__); "
                                        "print(blobgc.__version__); print(q.load('sweep/delete_blobs')[:2])")
    path, version, sql = out.strip().splitlines()
    assert path.startswith(str(installed_python.parent.parent)) and "site-packages" in path, path
    assert not path.startswith(str(ROOT / "plugins"))
    assert version == subprocess.run([sys.executable, "-c", "import blobgc; print(blobgc.__version__)"],
                                     capture_output=True, text=True, check=True).stdout.strip()
    assert sql == "--"


def test_the_airflow_plugin_is_registered_by_the_entry_point(install):
    plugins = json.loads(install["ok"]("airflow", "plugins", "--output", "json").splitlines()[-1])
    (ours,) = [p for p in plugins if p["name"] == "blobgc"]  # the plugins folder is empty: only the wheel has it
    assert "value='blobgc.reclaim.plugin:BlobgcReclaimPlugin', group='airflow.plugins'" in ours["source"], ours
    assert ours["fastapi_apps"] and ours["external_views"], ours


def test_the_install_command_writes_one_short_file_per_dag(install):
    written = sorted(p.name for p in install["dags"].glob("*.py"))
    assert written == ["blobgc_mark.py", "blobgc_reconcile.py", "blobgc_restore.py", "blobgc_sweep.py"]
    text = (install["dags"] / "blobgc_sweep.py").read_text()
    code = [line for line in text.split('"""')[-1].splitlines() if line.strip()]
    assert code == ["from blobgc.dags import load  # airflow DAG from the installed blobgc package",
                    'dag = load("blobgc_sweep")']
    listed = json.loads(install["ok"]("airflow", "dags", "list", "--local", "--output", "json").splitlines()[-1])
    assert sorted(d["dag_id"] for d in listed) == [w[:-3] for w in written]
    assert {d["dag_id"]: d["fileloc"] for d in listed} == {w[:-3]: str(install["dags"] / w) for w in written}
    created_paused = install["ok"]("python", "-c", "from blobgc.dags import DAGS, load; "
                                                   "print(all(load(d).is_paused_upon_creation for d in DAGS))")
    assert created_paused.strip().splitlines()[-1] == "True"


def test_mark_and_sweep_from_the_installed_package_collect_the_teams_own_table(install):
    install["ok"]("airflow", "dags", "test", "blobgc_mark")
    install["ok"]("airflow", "dags", "test", "blobgc_sweep", "-c", json.dumps({"grace_hours": 0}))
    with psycopg.connect(install["app_dsn"]) as app:
        left = sorted(r[0] for r in app.execute("SELECT id FROM shop.upload"))
        reclaimed = app.execute("SELECT sum(rows_deleted), sum(objects_deleted), sum(bytes_reclaimed) "
                                "FROM blobgc.reclaim_daily_by_collection WHERE collection = 'uploads' "
                                "AND NOT dry_run").fetchone()
    assert left == REFERENCED
    assert object_keys(install["s3"], install["bucket"]) == {f"uploads/{i}/raw" for i in REFERENCED}
    assert reclaimed == (len(UNREFERENCED), len(UNREFERENCED), sum(10 * i for i in UNREFERENCED))


def test_a_dag_enabled_without_its_tables_fails_its_first_task_naming_them(install):
    install["ok"]("python", "-m", "blobgc.dags", "install", str(install["dags"]), "blobgc_paste_expiry")
    try:
        result = install["run"]("airflow", "dags", "test", "blobgc_paste_expiry")
    finally:
        (install["dags"] / "blobgc_paste_expiry.py").unlink()
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-4000:]
    assert "needs the table(s) app.paste, app.content" in output, output[-4000:]
