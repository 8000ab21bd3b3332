"""A run's manifest, CSV or JSON, encoded a batch at a time as the server-side cursor yields it.

`manifest_chunks` is a plain generator of text chunks: it opens its own connection when first iterated and
closes it when exhausted or closed (`.close()`), so an abandoned download frees the connection at once.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from blobgc.reclaim.receipts import MANIFEST_COLUMNS, jsonable_value, manifest_rows

FORMATS = {"csv": "text/csv; charset=utf-8", "json": "application/json"}


def manifest_filename(dag_id: str, run_id: str, fmt: str) -> str:
    """A file name safe in a Content-Disposition header: the run's ids with anything unusual replaced."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{dag_id}__{run_id}")
    return f"blobgc_manifest__{safe}.{fmt}"


def manifest_chunks(
    connect: Callable[[], AbstractContextManager[psycopg.Connection]],
    dag_id: str,
    run_id: str,
    fmt: str,
    *,
    batch: int = 5000,
) -> Generator[str, None, None]:
    """The manifest as text chunks, one per batch of keys: CSV with a header line, or one JSON array."""
    if fmt not in FORMATS:
        raise ValueError(f"manifest format must be one of {sorted(FORMATS)}, got {fmt!r}")
    with connect() as conn:
        if fmt == "csv":
            yield ",".join(MANIFEST_COLUMNS) + "\r\n"
        else:
            yield "["
        first = True
        for rows in manifest_rows(conn, dag_id, run_id, batch=batch):
            if fmt == "csv":
                yield csv_lines(rows)
            else:
                yield ("" if first else ",") + ",".join(json_object(r) for r in rows)
            first = False
        if fmt == "json":
            yield "]\n"


def csv_lines(rows: list[tuple[Any, ...]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerows(tuple("" if v is None else jsonable_value(v) for v in r) for r in rows)
    return out.getvalue()


def json_object(row: tuple[Any, ...]) -> str:
    return "\n" + json.dumps(
        dict(zip(MANIFEST_COLUMNS, (jsonable_value(v) for v in row), strict=True)), separators=(",", ":")
    )
