"""Files a run shares between its tasks, kept under a prefix of a bucket blobgc owns while the run lasts.

A reconcile from an inventory report writes the report's keys and the keys the rows form once, into part files by
hash, so that each part is anti-joined by a mapped task of its own, on any worker (issue 34). A worker's disk is not
shared, so the files go to the **scratch location**: Variable `blobgc_scratch` (`s3://bucket/prefix`, `gs://...` or
`az://container/prefix`, read through the connection that bucket is routed to), by default the report's own
destination bucket under `.blobgc-scratch/`. A run's files are below `{location}{dag_id}/{run_id}/{bucket}/`:

- each part's files are deleted once the part is done (a retry of a done part needs none);
- a run deletes what earlier runs of its DAG left there more than `LEFT_FOR` (7 days) ago (a run that failed for
  good): until then, a failed part of such a run may still be cleared and run again from its files;
- reconcile never judges a key under `.blobgc-scratch/` an orphan or an unknown key (`is_scratch`).

A lifecycle rule expiring the prefix after a few days is a good backstop where the location is a bucket of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from botocore.exceptions import ClientError

from blobgc.core.objects import (
    ACCESS_DENIED_CODES,
    ObjectStore,
    delete_objects_in_batches,
    error_code,
    folder_url,
    listing,
)
from blobgc.core.settings import ConfigurationError

log = logging.getLogger(__name__)

FOLDER = ".blobgc-scratch/"
VARIABLE = "blobgc_scratch"
TRANSFERS = 4  # files put or fetched at a time
# what earlier runs left is deleted once this old: a failed run's part may still be cleared and run again until then
LEFT_FOR = timedelta(days=7)


def is_scratch(key: str) -> bool:
    """Whether `key` is a run's scratch file in the default location: never an orphan, never an unknown key."""
    return key.startswith(FOLDER)


@dataclass(frozen=True)
class Location:
    """A folder of a bucket: `scheme://bucket/prefix` (prefix "" or ending in "/")."""

    scheme: str
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, text: str, *, origin: str = f"Variable {VARIABLE}") -> Location:
        parsed = folder_url(text)
        if parsed is None:
            raise ConfigurationError(
                f"{origin} is {text!r}, not s3://<bucket>/<prefix>, gs://<bucket>/<prefix> or "
                "az://<container>/<prefix>: the folder where a reconcile from an inventory keeps its part files"
            )
        return cls(*parsed)

    def below(self, *names: str) -> Location:
        return Location(self.scheme, self.bucket, self.prefix + "".join(f"{n.strip('/')}/" for n in names))

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}"


def default_location(scheme: str, bucket: str) -> Location:
    """`.blobgc-scratch/` in `bucket` (a report's destination bucket)."""
    return Location(scheme, bucket, FOLDER)


def run_folder(root: Location, dag_id: str, run_id: str) -> Location:
    return root.below(dag_id, run_id)


def put_tree(store: ObjectStore, directory: Path, into: Location) -> int:
    """Put every file below `directory` under `into`, by its relative path; returns the bytes put. A location blobgc
    may not write is a ConfigurationError naming Variable blobgc_scratch."""
    files = [p for p in sorted(directory.rglob("*")) if p.is_file()]

    def put(path: Path) -> int:
        with path.open("rb") as body:
            store.put_object(Bucket=into.bucket, Key=into.prefix + path.relative_to(directory).as_posix(), Body=body)
        return path.stat().st_size

    try:
        with ThreadPoolExecutor(TRANSFERS) as pool:
            return sum(pool.map(put, files))
    except ClientError as error:
        if error_code(error) not in ACCESS_DENIED_CODES:
            raise
        raise ConfigurationError(
            f"may not write the scratch files to {into} ({error_code(error)}): the connection of bucket "
            f"{into.bucket} needs PutObject, GetObject, ListBucket and DeleteObject there, or set Variable "
            f"{VARIABLE} to a folder it may write (s3://bucket/prefix), e.g. a bucket of blobgc's own"
        ) from error


def keys_below(store: ObjectStore, where: Location) -> Iterator[str]:
    for item in listing(store, where.bucket, where.prefix):
        yield item["Key"]


def fetch_tree(store: ObjectStore, where: Location, directory: Path) -> list[Path]:
    """Fetch every file under `where` into `directory` (by its path below `where`); returns their paths, sorted."""
    keys = list(keys_below(store, where))

    def fetch(key: str) -> Path:
        path = directory / key[len(where.prefix) :]
        path.parent.mkdir(parents=True, exist_ok=True)
        body = store.get_object(Bucket=where.bucket, Key=key)["Body"]
        with path.open("wb") as out:
            for chunk in iter(lambda: body.read(1 << 20), b""):
                out.write(chunk)
        return path

    with ThreadPoolExecutor(TRANSFERS) as pool:
        return sorted(pool.map(fetch, keys))


def delete_tree(
    store: ObjectStore, where: Location, *, keep: str | None = None, written_before: datetime | None = None
) -> int:
    """Delete every object under `where` (but those under `keep`, a deeper prefix, and, with `written_before`, those
    written since); returns how many. A key the store refuses to delete is logged and left: scratch files are never
    owed."""
    keys = [
        o["Key"]
        for o in listing(store, where.bucket, where.prefix)
        if not (keep and o["Key"].startswith(keep)) and (written_before is None or o["LastModified"] < written_before)
    ]
    if not keys:
        return 0
    outcome = delete_objects_in_batches(store, where.bucket, keys, concurrency=4)
    if outcome.failed:
        log.warning(
            "%d scratch files under %s were not deleted (e.g. %s: %s)",
            len(outcome.failed),
            where,
            *next(iter(outcome.failed.items())),
        )
    return len(keys) - len(outcome.failed)
