"""docker-compose.yaml and airflow_settings.yaml declare what the contract names."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import uuid
import zipfile
from pathlib import Path

import yaml
from packaging.requirements import Requirement


ROOT = Path(__file__).resolve().parents[2]


CONN_IDS = {"blobgc_postgres", "blobgc_s3", "blobgc_redis"}
OPTIONAL_CONN_IDS = {"blobgc_airflow_api"}  # the pool check's, declared by compose


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yaml").read_text())


def test_compose_has_the_production_services():
    services = compose()["services"]
    for name in ("postgres", "redis", "minio", "airflow-apiserver", "airflow-scheduler",
                 "airflow-dag-processor", "airflow-triggerer", "airflow-worker"):
        assert name in services, name


def test_compose_airflow_uses_celery_and_mounts_dags_plugins_include():
    services = compose()["services"]
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
                 "airflow-worker"):
        service = services[name]
        assert service["environment"]["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
        targets = {v.split(":")[1] for v in service["volumes"]}
        assert {"/opt/airflow/dags", "/opt/airflow/plugins", "/opt/airflow/include"} <= targets
        for conn_id in CONN_IDS | OPTIONAL_CONN_IDS:
            assert f"AIRFLOW_CONN_{conn_id.upper()}" in service["environment"]


def test_airflow_settings_declare_connections_variables_and_pool():
    settings = yaml.safe_load((ROOT / "airflow_settings.yaml").read_text())["airflow"]
    assert {c["conn_id"] for c in settings["connections"]} == CONN_IDS
    types = {c["conn_id"]: c["conn_type"] for c in settings["connections"]}
    assert types == {"blobgc_postgres": "postgres", "blobgc_s3": "aws", "blobgc_redis": "redis"}
    variables = {v["variable_name"]: v["variable_value"] for v in settings["variables"]}
    assert variables["blobgc_bucket"] == "blobgc"
    assert variables["blobgc_media_bucket_prefix"] == "fakebook-"
    assert "blobgc_s3" in {p["pool_name"] for p in settings["pools"]}


# ---------------------------------------------------------------- issue 18: the image, its pools, its password
RELEASE_TAG = re.compile(r"RELEASE\.\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}Z")


def init_command() -> str:
    """airflow-init's shell command as the container runs it (compose's `$$` is a literal `$`)."""
    return compose()["services"]["airflow-init"]["command"][0].replace("$$", "$")


def test_compose_pins_minio_and_its_client_to_release_tags():
    images = {name: service.get("image", "") for name, service in compose()["services"].items()}
    minio = {name: image for name, image in images.items() if image.startswith(("minio/", "quay.io/minio/"))}
    assert {"minio", "minio-init"} <= set(minio), minio
    for name, image in minio.items():
        assert RELEASE_TAG.fullmatch(image.rpartition(":")[2]), f"{name}: {image} is not pinned to a release tag"
    for name, image in images.items():
        assert image and not image.endswith(":latest") and ":" in image, f"{name}: {image!r} is not pinned"


def test_compose_bakes_in_no_admin_password(tmp_path):
    """The UI's admin password comes from BLOBGC_ADMIN_PASSWORD, which has no default and reaches only airflow-init:
    it refuses to start without it (and without the pool check's read-only user's, BLOBGC_POOLS_PASSWORD) and
    writes both, and only them, into the simple auth manager's passwords file (issue 18)."""
    text = (ROOT / "docker-compose.yaml").read_text()
    assert "admin / admin" not in text and "admin:admin@" not in text
    services = compose()["services"]
    for name, service in services.items():  # the admin password is in no other container's environment
        if name != "airflow-init":
            assert "BLOBGC_ADMIN_PASSWORD" not in json.dumps(service.get("environment") or {}), name
    init_env = services["airflow-init"]["environment"]
    assert init_env["BLOBGC_ADMIN_PASSWORD"] == "${BLOBGC_ADMIN_PASSWORD:-}"
    assert init_env["BLOBGC_POOLS_PASSWORD"] == "${BLOBGC_POOLS_PASSWORD:-}"
    env = services["airflow-apiserver"]["environment"]
    assert str(env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "false")).lower() == "false"
    users = [u.split(":") for u in env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(",")]
    assert users == [["admin", "admin"], ["blobgc-pools", "viewer"]]  # username:role: no password here
    passwords_file = Path(env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
    for name in ("airflow-init", "airflow-apiserver"):  # the file lives in a volume the two of them share
        assert f"airflow-auth:{passwords_file.parent}" in services[name]["volumes"], name
    assert f"mkdir -p {passwords_file.parent}" in (ROOT / "Dockerfile").read_text()  # the volume is airflow's
    assert "airflow-auth" not in str(services["airflow-worker"].get("volumes"))
    api = json.loads(env["AIRFLOW_CONN_BLOBGC_AIRFLOW_API"])
    assert (api["login"], api["password"]) == ("blobgc-pools", "${BLOBGC_POOLS_PASSWORD:-}")

    setup = init_command().split(" && airflow db migrate")[0]  # the refusal and the passwords file, run here
    target = tmp_path / "passwords.json"
    password, pools = f"p\"w\\{uuid.uuid4().hex} $HOME", uuid.uuid4().hex
    written = subprocess.run(["bash", "-c", setup], capture_output=True, text=True, env={
        **os.environ, "BLOBGC_ADMIN_PASSWORD": password, "BLOBGC_POOLS_PASSWORD": pools,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(target)})
    assert written.returncode == 0, written.stderr
    assert json.loads(target.read_text()) == {"admin": password, "blobgc-pools": pools}
    assert target.stat().st_mode & 0o777 == 0o600
    for missing in ("BLOBGC_ADMIN_PASSWORD", "BLOBGC_POOLS_PASSWORD"):
        refused = subprocess.run(["bash", "-c", setup], capture_output=True, text=True, env={
            **os.environ, "BLOBGC_ADMIN_PASSWORD": password, "BLOBGC_POOLS_PASSWORD": pools, missing: "",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(target)})
        assert refused.returncode == 1 and "BLOBGC_POOLS_PASSWORD must be set" in refused.stderr, missing


def test_compose_init_and_airflow_settings_create_every_pool_the_dags_use():
    from blobgc.dag_kit.params import HTTP_POOL, S3_POOL
    from blobgc.dag_kit.pools import POOLS

    assert set(POOLS) == {S3_POOL, HTTP_POOL}
    created = {}
    for step in init_command().split(" && "):
        argv = shlex.split(step.strip())
        if argv[:3] == ["airflow", "pools", "set"]:
            created[argv[3]] = (int(argv[4]), argv[5])
    assert created == {name: (spec.slots, spec.description) for name, spec in POOLS.items()}
    settings = yaml.safe_load((ROOT / "airflow_settings.yaml").read_text())["airflow"]
    assert {p["pool_name"]: (p["pool_slot"], p["pool_description"]) for p in settings["pools"]} == created


def test_the_image_installs_the_blobgc_wheel_built_by_its_first_stage(tmp_path):
    """Stage 1 builds the wheel from what it copies (built here the same way), stage 2 installs it into the
    official image; nothing on compose's PYTHONPATH shadows it with the mounted source."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", dockerfile, flags=re.M)[1:]
    assert len(stages) == 2, "a multi-stage build: the wheel, then the image"
    builder, image = stages
    builder_name = builder.split()[2]
    assert builder.split()[1] == "AS" and "pip wheel --no-cache-dir --no-deps -w /dist ." in builder
    assert image.startswith("apache/airflow:3.3.2-python3.11")
    assert f"COPY --from={builder_name} /dist/ /dist/" in image
    assert re.search(r"pip install [^\n]*/dist/blobgc-\*\.whl", image)
    assert compose()["x-airflow-common"]["build"] == "."
    assert "PYTHONPATH" not in compose()["x-airflow-common"]["environment"]

    for line in builder.splitlines():  # stage 1's build context, copied as it copies it
        if line.startswith("COPY "):
            *sources, target = line.split()[1:]
            destination = tmp_path / "src" / target
            for source in sources:
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, destination, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    destination.mkdir(parents=True, exist_ok=True)
                    shutil.copy(ROOT / source, destination / Path(source).name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                            str(tmp_path / "dist"), "."], cwd=tmp_path / "src", capture_output=True, text=True,
                           timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("blobgc-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"blobgc/dag_kit/pools.py", "blobgc/dags/blobgc_sweep.py",
            "blobgc/sql/cache/claim_cache_purges.sql"} <= names
    assert not any(name.startswith("demo_app/") for name in names)


def test_the_image_adds_only_what_the_demo_app_needs_pinned_as_the_local_stack():
    """The wheel brings blobgc's dependencies and the official image has statsd: the image adds the demo
    application's Pillow and pillow-heif, at the versions requirements.txt pins."""
    pins = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    wanted = dict(line.split("==") for line in (ROOT / "docker/requirements-image.txt").read_text().splitlines()
                  if line and not line.startswith("#"))
    assert set(wanted) == {"pillow", "pillow-heif"}
    assert wanted == {name: pins[name] for name in wanted}


# ---------------------------------------------------------------- issue 30: packaging without warnings
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_pyproject_declares_an_spdx_license_no_license_classifier_and_a_bounded_build_backend():
    """PEP 639: `license` is an SPDX string (a table and License classifiers are deprecated by setuptools), and
    the build backend has an upper bound that admits the setuptools requirements.txt pins (the no-isolation
    builds of the install test and of this file use it)."""
    project = pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert [c for c in project.get("classifiers", []) if c.startswith("License ::")] == []
    (setuptools,) = [Requirement(r) for r in pyproject()["build-system"]["requires"]
                     if Requirement(r).name == "setuptools"]
    assert any(spec.operator in ("<", "<=", "~=", "==") for spec in setuptools.specifier), setuptools
    assert setuptools.specifier.contains("77.0.0")  # the first setuptools that reads an SPDX license string
    pins = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert setuptools.specifier.contains(pins["setuptools"]), (setuptools, pins["setuptools"])


def test_building_the_wheel_prints_no_deprecation_warning(tmp_path):
    """The wheel built as the install test builds it (a copy of what it is made of, the lock's setuptools),
    verbosely, so that setuptools' warnings reach the output: none is a deprecation."""
    source = tmp_path / "source"
    source.mkdir()
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    shutil.copytree(ROOT / "plugins" / "blobgc", source / "plugins" / "blobgc",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True,
                           timeout=300)
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    assert "Deprecat" not in output, [line for line in output.splitlines() if "eprecat" in line]
    (wheel,) = (tmp_path / "dist").glob("blobgc-*.whl")
    metadata = zipfile.ZipFile(wheel).read(f"blobgc-{wheel.name.split('-')[1]}.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
