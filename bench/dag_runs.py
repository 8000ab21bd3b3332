#!/usr/bin/env python3
"""What a whole DAG run costs the test suite: `airflow dags test` in a process of its own (the CLI, which
starts Airflow every time) against the suite's in-process runner (`tests.helpers.run_dag`: the same
`DAG.test()`, with Airflow started once), measured in the same run on the same data.

The run is a dry run of blobgc_sweep over `--blobs` blobs unused for 3 days (it reads and reports, and
changes nothing, so every run does the same work), on a fresh database of its own.

    make up && source .blobgc/env && python bench/dag_runs.py
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

from bench_database import ROOT, fresh_database
from psycopg.conninfo import conninfo_to_dict

sys.path.insert(0, str(ROOT))

from blobgc.core.clients import pg_connect, s3_client_from_env  # noqa: E402
from tests.helpers import make_blobs, run_dag, set_unused_since  # noqa: E402

DAG = "blobgc_sweep"
CONF = {"dry_run": True}


def cli_run(env: dict[str, str]) -> float:
    start = time.perf_counter()
    argv = ["airflow", "dags", "test", DAG, "-c", json.dumps(CONF), "-f", str(ROOT / "dags" / f"{DAG}.py")]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"airflow dags test failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return took


def in_process_run(env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = run_dag(DAG, conf=CONF, env_extra=env)
    took = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"in-process run failed:\n{result.output[-3000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blobs", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    dsn = fresh_database()
    parts = conninfo_to_dict(dsn)
    os.environ["AIRFLOW_CONN_BLOBGC_POSTGRES"] = (
        f"postgresql://{parts.get('user', 'postgres')}@{parts['host']}:{parts['port']}/{parts['dbname']}")
    s3 = s3_client_from_env()
    bucket = f"bench-dagruns-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    with pg_connect(dsn) as conn:
        set_unused_since(conn, make_blobs(conn, s3, bucket, args.blobs, thumbnails=False), "3 days")
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket}

    cli = [cli_run({**os.environ, **env}) for _ in range(args.runs)]
    first = in_process_run(env)  # starts Airflow in this process: paid once per test session
    warm = [in_process_run(env) for _ in range(args.runs)]

    cli_median, warm_median = statistics.median(cli), statistics.median(warm)
    session = first + sum(warm[:args.runs - 1])  # the same number of runs, Airflow's start-up included
    print(f"dry run of {DAG} over {args.blobs} unused blobs, {args.runs} runs each")
    print(f"  airflow dags test (CLI, own process):  median {cli_median:6.2f} s  "
          f"(min {min(cli):.2f}, max {max(cli):.2f})")
    print(f"  in-process DAG.test(), first run:      {first:6.2f} s  (Airflow started in this process)")
    print(f"  in-process DAG.test(), later runs:     median {warm_median:6.2f} s  "
          f"(min {min(warm):.2f}, max {max(warm):.2f})")
    print(f"  ratio CLI / in-process: {cli_median / warm_median:.1f}x per run; {args.runs} runs: "
          f"{sum(cli):.1f} s vs {session:.1f} s, {sum(cli) / session:.1f}x with the start-up counted")


if __name__ == "__main__":
    main()
