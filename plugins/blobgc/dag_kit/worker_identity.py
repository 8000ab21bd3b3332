"""The hostname a local Celery worker reports for the tasks it runs (Airflow's `[core] hostname_callable`).

`make up EXECUTOR=celery` runs two workers on one machine; each gets BLOBGC_WORKER_NAME, so the
task instances show which worker ran them, as two machines' hostnames would. Anywhere else the
machine's fully qualified name is used, as Airflow does by default.
"""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    return os.environ.get("BLOBGC_WORKER_NAME") or socket.getfqdn()
