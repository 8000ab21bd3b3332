"""The install test (issue 18): blobgc as a platform team adds it to an Airflow it already runs.

`scripts/install_venv.py` builds the wheel from this checkout and installs it into a virtualenv that held
only Airflow and the providers (from the pinned lock, cached under .blobgc/). That Airflow gets its own
metadata database, DAG folder and (empty) plugins folder, and is pointed at the local stack's PostgreSQL,
S3 and Redis through the usual connections. Nothing of the checkout is on its path: the DAGs come from
`python -m blobgc.dags install`, the plugin from the wheel's entry point, the SQL from package data. Its
commands (`airflow ...`, `python -m ...`) run one after another in one interpreter of that virtualenv, through
the same entry points as their console scripts (tests/support/cli_session.py): Airflow starts once for the module
instead of once per command (about 12 s of CPU each), and each DAG is still parsed anew for each run.

Its application is not the demo's: a `shop` schema of the team's own, declared in a collections file, with a
referencing table by foreign key (`shop.post`) and one only a `references` query follows (`shop.attachment`).
blobgc works in it as a least-privilege role made by exactly the README's GRANT block (tests/support/grants.py)
in a database whose PUBLIC privileges are revoked: that role migrates blobgc's schema and runs every DAG.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from blobgc.core.clients import s3_client_from_env
from tests.helpers import ROOT, TEST_DB, backdate_object, object_keys
from tests.support import install as support_install
from tests.support.cli_session import CliSession
from tests.support.grants import REFERENCES_QUERY, readme_block, with_names
from tests.support.grants import SHOP_SCHEMA as SHOP_TABLES

pytestmark = pytest.mark.integration

# A session with a test database of its own (BLOBGC_TEST_DB) installs beside the others, not over them.
OWN = "" if TEST_DB == "blobgc_test" else f"_{TEST_DB}"
INSTALL_HOME = ROOT / ".blobgc" / f"install-airflow{OWN}"  # the installed Airflow's AIRFLOW_HOME
METADATA_DB = f"blobgc_install_airflow{OWN}"  # the installed Airflow's own metadata database (kept between runs)
APP_DB = f"blobgc_install_app{OWN}"  # the team's application database (made anew for each run)
ROLE = f"blobgc_install{OWN}"  # the README's least-privilege role, `blobgc` there (made anew for each run)
SHOP_SCHEMA = SHOP_TABLES + """
INSERT INTO shop.upload SELECT i, 10 * i FROM generate_series(1, 6) AS i;
INSERT INTO shop.post VALUES (1, 1), (2, 2), (3, NULL);
INSERT INTO shop.attachment (target_kind, target_id) VALUES ('upload', 3), ('invoice', 4);
"""
# 1 and 2 by shop.post's foreign key, 3 by the references query on shop.attachment (4 is another kind's id)
REFERENCED, UNREFERENCED = [1, 2, 3], [4, 5, 6]
ORPHAN = "uploads/99/raw"  # an object no row forms: reconcile's


def database_dsn(dsn: str, dbname: str) -> str:
    return make_conninfo(**{**conninfo_to_dict(dsn), "dbname": dbname})


def url_of(dsn: str, dbname: str, scheme: str = "postgresql", user: str | None = None) -> str:
    parts = conninfo_to_dict(dsn)
    user = user or parts.get("user", "postgres")
    return f"{scheme}://{user}@{parts.get('host', '127.0.0.1')}:{parts.get('port', 5432)}/{dbname}"


@pytest.fixture(scope="module")
def installed_python(stack) -> Path:
    """The virtualenv's python, with this checkout's wheel freshly installed into it (built in the background
    since collection: tests/support/install.py)."""
    return support_install.installed_python()


@pytest.fixture(scope="module")
def install(request, stack, installed_python):
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
    s3_client_from_env().put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    collections = home / "collections.yaml"
    collections.write_text(
        "collections:\n"
        "  uploads:\n"
        "    table: shop.upload\n"
        "    id: id\n"
        "    size: size_bytes\n"
        f"    bucket: {bucket}\n"
        "    keys: ['uploads/{id}/raw']\n"
        "    grace_hours: 0\n"
        f"    references: [\"{REFERENCES_QUERY}\"]\n")
    dsn = stack["BLOBGC_PG_DSN"]
    with psycopg.connect(dsn, autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [METADATA_DB]).fetchone():
            admin.execute(f"CREATE DATABASE {METADATA_DB}")
        admin.execute(f"DROP DATABASE IF EXISTS {APP_DB} WITH (FORCE)")
        admin.execute(f"DROP ROLE IF EXISTS {ROLE}")
        admin.execute(f"CREATE DATABASE {APP_DB}")
    with psycopg.connect(database_dsn(dsn, APP_DB), autocommit=True) as app:  # the team's DBA, once
        app.execute(f"REVOKE ALL ON DATABASE {APP_DB} FROM PUBLIC")  # a hardened database: every grant counts
        app.execute(SHOP_SCHEMA)
        for statement in readme_block():  # exactly the README's block, with this test's role and database
            app.execute(with_names(statement, ROLE, APP_DB))

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

    session = CliSession(installed_python, cwd=home, env=env)  # the commands' interpreter: tests/support
    request.addfinalizer(session.close)

    def run(*argv: str, timeout: int = 600, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return session.run(*argv, timeout=timeout, env_extra=env_extra)

    def ok(*argv: str, timeout: int = 600) -> str:
        result = run(*argv, timeout=timeout)
        assert result.returncode == 0, f"{' '.join(argv)} failed:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
        return result.stdout

    # the README's "Install into an existing Airflow" steps, in order; blobgc_postgres is stored in the metadata
    # database, as `airflow connections add` does it (S3 and Redis come from the environment, as AIRFLOW_CONN_*)
    ok("airflow", "db", "migrate")
    run("airflow", "connections", "delete", "blobgc_postgres")
    ok("airflow", "connections", "add", "blobgc_postgres", "--conn-uri", url_of(dsn, APP_DB, user=ROLE))
    ok("python", "-m", "blobgc.dags", "install", str(dags), "--collections")
    ok("python", "-m", "blobgc.migrate", "--conn-id", "blobgc_postgres")
    ok("airflow", "pools", "set", "blobgc_s3", "4", "S3 batch deletes (blobgc)")
    ok("airflow", "pools", "set", "blobgc_http", "4", "partner photo downloads (blobgc_crawler)")

    s3 = s3_client_from_env()
    for i in REFERENCED + UNREFERENCED:
        s3.put_object(Bucket=bucket, Key=f"uploads/{i}/raw", Body=b"x" * (10 * i))
    s3.put_object(Bucket=bucket, Key=ORPHAN, Body=b"orphan")
    backdate_object(bucket, ORPHAN, 2 * 3600)  # past reconcile's age floor of 1 hour
    yield {"run": run, "ok": ok, "dags": dags, "bucket": bucket, "app_dsn": database_dsn(dsn, APP_DB), "s3": s3}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for item in page.get("Versions", []) + page.get("DeleteMarkers", []):
            s3.delete_object(Bucket=bucket, Key=item["Key"], VersionId=item["VersionId"])
    s3.delete_bucket(Bucket=bucket)


def test_the_installed_package_comes_from_the_wheel_with_its_sql(install, installed_python):
    out = install["ok"]("python", "-c", "import blobgc, blobgc.core.queries as q; print(blobgc.__file__); "
                                        "print(blobgc.__version__); print(q.load('sweep/delete_blobs', 'blobgc.kinds.blobs')[:1] "
                                        "+ q.load('plans/insert_plan_item')[:1])")
    path, version, sql = out.strip().splitlines()
    assert path.startswith(str(installed_python.parent.parent)) and "site-packages" in path, path
    assert not path.startswith(str(ROOT / "plugins"))
    assert version == subprocess.run([sys.executable, "-c", "import blobgc; print(blobgc.__version__)"],
                                     capture_output=True, text=True, check=True).stdout.strip()
    assert sql == "--"


def test_the_azure_extra_brings_its_store_and_a_store_without_its_extra_names_the_one_to_install(install):
    """Issue 33: installed as `blobgc[azure]`, a wasb connection is an Azure Blob Storage store (it lists the local
    Azurite's container); the base install stays S3-only, so a google_cloud_platform connection is refused naming
    blobgc[gcs] instead of failing on an import deep in a task."""
    env = {name: os.environ[name] for name in ("AIRFLOW_CONN_BLOBGC_AZURE", "AIRFLOW_CONN_BLOBGC_GCS")}
    script = ("from blobgc.dag_kit.connections import store_client\n"
              "from blobgc.core.settings import ConfigurationError\n"
              "azure = store_client('blobgc_azure')\n"
              "print(type(azure).__name__, azure.list_objects_v2(Bucket='blobgc-azure', MaxKeys=1)['KeyCount'] >= 0)\n"
              "try:\n    store_client('blobgc_gcs')\nexcept ConfigurationError as error:\n    print(error)\n")
    result = install["run"]("python", "-c", script, env_extra=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-2] == "AzureStore True", lines
    assert "whose provider is not installed" in lines[-1] and lines[-1].endswith("install blobgc[gcs]"), lines


def test_the_airflow_plugin_is_registered_by_the_entry_point(install):
    plugins = json.loads(install["ok"]("airflow", "plugins", "--output", "json").splitlines()[-1])
    (ours,) = [p for p in plugins if p["name"] == "blobgc"]  # the plugins folder is empty: only the wheel has it
    assert "value='blobgc.plugin:BlobgcReclaimPlugin', group='airflow.plugins'" in ours["source"], ours
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


def runs_of(install, dag_id: str) -> list[tuple[str, bool]]:
    with psycopg.connect(install["app_dsn"]) as app:
        return app.execute("SELECT run_id, dry_run FROM blobgc.run WHERE dag_id = %s ORDER BY started_at",
                           [dag_id]).fetchall()


def test_the_readme_role_migrates_marks_sweeps_reconciles_and_restores_the_teams_own_table(install):
    """As the role the README's GRANT block makes, and nothing more: migrate (the fixture), mark, a dry run and a
    real run of the sweep, reconcile and restore, each from the installed package."""
    ok, s3, bucket = install["ok"], install["s3"], install["bucket"]
    with psycopg.connect(install["app_dsn"]) as app:  # the role migrated blobgc's schema, and owns its tables
        owners = {r[0] for r in app.execute("SELECT tableowner FROM pg_tables WHERE schemaname = 'blobgc'")}
    assert owners == {ROLE}
    ok("airflow", "dags", "test", "blobgc_mark")
    ok("airflow", "dags", "test", "blobgc_sweep", "-c", json.dumps({"dry_run": True}))
    with psycopg.connect(install["app_dsn"]) as app:
        planned = app.execute("SELECT rows_deleted FROM blobgc.run WHERE dag_id = 'blobgc_sweep' AND dry_run"
                              ).fetchone()
        assert sorted(r[0] for r in app.execute("SELECT id FROM shop.upload")) == REFERENCED + UNREFERENCED
    assert planned == (len(UNREFERENCED),)
    ok("airflow", "dags", "test", "blobgc_sweep", "-c", json.dumps({"grace_hours": 0}))
    with psycopg.connect(install["app_dsn"]) as app:
        left = sorted(r[0] for r in app.execute("SELECT id FROM shop.upload"))
        reclaimed = app.execute("SELECT sum(rows_deleted), sum(objects_deleted), sum(bytes_deleted) "
                                "FROM blobgc.reclaim_daily_by_collection WHERE collection = 'uploads' "
                                "AND NOT dry_run").fetchone()
    assert left == REFERENCED
    assert object_keys(s3, bucket) == {f"uploads/{i}/raw" for i in REFERENCED} | {ORPHAN}
    assert reclaimed == (len(UNREFERENCED), len(UNREFERENCED), sum(10 * i for i in UNREFERENCED))

    ok("airflow", "dags", "test", "blobgc_reconcile", "-c", json.dumps({"min_age_hours": 1, "confirmations": 1}))
    assert object_keys(s3, bucket) == {f"uploads/{i}/raw" for i in REFERENCED}

    ((swept, _dry),) = [r for r in runs_of(install, "blobgc_sweep") if not r[1]]
    ok("airflow", "dags", "test", "blobgc_restore", "-c",
       json.dumps({"run_id": swept, "source_dag_id": "blobgc_sweep"}))
    with psycopg.connect(install["app_dsn"]) as app:
        assert sorted(r[0] for r in app.execute("SELECT id FROM shop.upload")) == REFERENCED + UNREFERENCED
    assert object_keys(s3, bucket) == {f"uploads/{i}/raw" for i in REFERENCED + UNREFERENCED}


def test_a_dry_run_without_a_grant_the_real_run_needs_fails_its_first_task_at_once_naming_the_grant(install):
    """The reported bug: the dry run passed and the real sweep failed on FOR UPDATE. Without UPDATE on the blob
    table the dry run's first task fails, with the default 3 retries configured, once and at once (its retry
    would wait BLOBGC_RETRY_DELAY_SECONDS), naming the privilege and its GRANT; nothing is recorded."""
    before = runs_of(install, "blobgc_sweep")
    with psycopg.connect(install["app_dsn"], autocommit=True) as app:
        app.execute(f"REVOKE UPDATE ON shop.upload FROM {ROLE}")
    retry_delay = 300
    try:
        started = time.monotonic()
        result = install["run"]("airflow", "dags", "test", "blobgc_sweep", "-c", json.dumps({"dry_run": True}),
                                env_extra={"BLOBGC_TASK_RETRIES": "3", "BLOBGC_RETRY_DELAY_SECONDS": str(retry_delay)})
        elapsed = time.monotonic() - started
    finally:
        with psycopg.connect(install["app_dsn"], autocommit=True) as app:
            app.execute(f"GRANT UPDATE ON shop.upload TO {ROLE}")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-4000:]
    assert elapsed < retry_delay / 2, (elapsed, output[-4000:])
    assert "UPDATE on table shop.upload: the real blobgc_sweep claims the rows of collection 'uploads'" in output
    assert f"GRANT UPDATE ON shop.upload TO {ROLE};" in output, output[-4000:]
    assert output.count("[DAG TEST] starting task_id=plan_shards") == 1, output[-4000:]  # run once, not retried
    assert "new_state=failed" in output and "up_for_retry" not in output.lower(), output[-4000:]
    assert runs_of(install, "blobgc_sweep") == before  # failed before the run was recorded


def test_a_dag_enabled_without_its_tables_fails_its_first_task_naming_them(install):
    install["ok"]("python", "-m", "blobgc.dags", "install", str(install["dags"]), "blobgc_paste_expiry")
    try:
        result = install["run"]("airflow", "dags", "test", "blobgc_paste_expiry")
    finally:
        (install["dags"] / "blobgc_paste_expiry.py").unlink()
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-4000:]
    assert "needs the table(s) app.paste, app.content" in output, output[-4000:]
