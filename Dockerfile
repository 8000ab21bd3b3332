# The Airflow image of docker-compose.yaml: the official image plus blobgc, installed from its wheel.
#
# Stage 1 builds the wheel from this checkout (pyproject.toml: the package blobgc from plugins/blobgc, its
# SQL as package data). Stage 2 installs it, with its dependencies, into apache/airflow:3.3.2-python3.11,
# plus what only the demo application needs (docker/requirements-image.txt). The demo application
# (plugins/demo_app) is not in the wheel: docker-compose.yaml mounts plugins/, dags/ and include/.

FROM python:3.11-slim-bookworm AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY plugins/blobgc/ plugins/blobgc/
RUN pip wheel --no-cache-dir --no-deps -w /dist .

FROM apache/airflow:3.3.2-python3.11
COPY --from=wheel /dist/ /dist/
COPY docker/requirements-image.txt /requirements-image.txt
# apache-airflow is named with its version so that no dependency range can move the image's Airflow
RUN pip install --no-cache-dir "apache-airflow==3.3.2" /dist/blobgc-*.whl -r /requirements-image.txt
# The mounted plugins folder goes on every Python process's path *after* the installed packages (a .pth
# beside the installed blobgc): `import blobgc` is the wheel, `import demo_app` the mount, also for
# `python -m demo_app.migrate`, which Airflow's own path setup does not reach.
RUN site="$(python -c 'import blobgc, pathlib; print(pathlib.Path(blobgc.__file__).parents[1])')" && \
    echo /opt/airflow/plugins > "$site/blobgc-mounted-plugins.pth" && \
    python -c 'import blobgc, sys; assert "site-packages" in blobgc.__file__, blobgc.__file__; print("blobgc", blobgc.__version__)'
# The simple auth manager's passwords file (written by airflow-init from BLOBGC_ADMIN_PASSWORD) lives in the
# named volume mounted here; the directory exists in the image so the volume is created owned by airflow.
RUN mkdir -p /opt/airflow/auth
