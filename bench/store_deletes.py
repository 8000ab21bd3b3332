#!/usr/bin/env python3
"""Delete throughput per object store, against the local stack's server for each (`make up; source .blobgc/env`).

For S3 (scripts/s3_server.py, moto), Google Cloud Storage (scripts/gcs_server.py, gcp-storage-emulator) and
Azure Blob Storage (scripts/azure_server.py, Azurite), each reached through its Airflow connection as the DAGs
reach it (`blobgc.dag_kit.connections.store_client`):

- blobgc: `blobgc.core.objects.delete_objects_in_batches`, as the outbox drain calls it: calls of up to 1000 keys,
  4 in flight. Each call is one S3 DeleteObjects; on GCS, JSON API batch requests of 100 deletes; on Azure, Blob
  Batch requests of 256 deletes.
- baseline: one request per object, with the store's own SDK (S3 DeleteObject, GCS `Blob.delete`, Azure
  `BlobClient.delete_blob`), one at a time, on a sample of the same bucket's objects in the same run.

Objects are written with 10 PUTs in flight (not timed). Every deleted key is checked gone by a listing.

    python bench/store_deletes.py                      # 5000 objects per store, a baseline sample of 500
    python bench/store_deletes.py --objects 20000 --stores gcs,azure
"""
from __future__ import annotations

import argparse
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))
sys.path.insert(0, str(ROOT))

from blobgc.core.objects import delete_objects_in_batches  # noqa: E402
from blobgc.dag_kit.connections import store_client  # noqa: E402
from tests.support.stores import CONN_IDS, azure_native, create_bucket, gcs_native, remove_bucket  # noqa: E402


def one_at_a_time(kind: str, client, bucket: str):
    """The baseline's delete of one key: one request of the store's own SDK."""
    if kind == "s3":
        return lambda key: client.delete_object(Bucket=bucket, Key=key)
    if kind == "gcs":
        native = gcs_native().bucket(bucket)
        return lambda key: native.delete_blob(key)
    container = azure_native().get_container_client(bucket)
    return lambda key: container.delete_blob(key)


def measure(kind: str, objects: int, sample: int) -> dict:
    client = store_client(CONN_IDS[kind])
    bucket = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    create_bucket(kind, client, bucket, versioned=False)  # deletes are measured, not the keeping of versions
    keys = [f"bench/{i:08d}/{uuid.uuid4().hex}" for i in range(objects + sample)]
    with ThreadPoolExecutor(10) as pool:  # the SDKs' HTTP pools hold 10 connections
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=b"x" * 128), keys))
    baseline_keys, blobgc_keys = keys[:sample], keys[sample:]

    delete = one_at_a_time(kind, client, bucket)
    start = time.perf_counter()
    for key in baseline_keys:
        delete(key)
    baseline = time.perf_counter() - start

    start = time.perf_counter()
    outcome = delete_objects_in_batches(client, bucket, blobgc_keys, concurrency=4)
    batched = time.perf_counter() - start
    left = {o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="bench/")
            for o in page.get("Contents", [])}
    assert not outcome.failed and not left, (outcome.failed, len(left))
    remove_bucket(kind, bucket)
    return {"store": kind, "objects": len(blobgc_keys), "calls": outcome.calls, "batched_s": batched,
            "batched_per_s": len(blobgc_keys) / batched, "sample": sample, "baseline_s": baseline,
            "baseline_per_s": sample / baseline}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=5000)
    parser.add_argument("--sample", type=int, default=500)
    parser.add_argument("--stores", default="s3,gcs,azure")
    args = parser.parse_args()
    print(f"{'store':6} {'objects':>8} {'calls':>6} {'blobgc s':>9} {'blobgc obj/s':>13} "
          f"{'baseline obj/s':>15} {'ratio':>7}")
    for kind in args.stores.split(","):
        r = measure(kind, args.objects, args.sample)
        print(f"{r['store']:6} {r['objects']:>8} {r['calls']:>6} {r['batched_s']:>9.2f} "
              f"{r['batched_per_s']:>13.0f} {r['baseline_per_s']:>15.0f} "
              f"{r['batched_per_s'] / r['baseline_per_s']:>6.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
