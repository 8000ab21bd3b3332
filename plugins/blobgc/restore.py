"""Undo one run's deletions: remove the delete markers its deletions left, put back the rows the log holds.

Only a versioned bucket can be undone: deleting a key there adds a delete marker, whose version id
the outbox records (`blobgc.deletion_settlement.version_ids`); removing that marker makes the
previous version current again. On an unversioned bucket the bytes are gone, and `plan_restore`
refuses before touching anything.

Rows come back only where the deletion log holds their image (`blobgc.deletion_log.rows`): seed
000's `app.blob`, whose sweep logs each deleted row. They return *used* (`unused = false`,
`updated_at = now()`), so no sweep takes them again before the next mark has looked at their
references. For every other source the report says, per source, why its rows cannot come back.

Every object, row and cancelled owed deletion is recorded in `blobgc.restore_item`: a retried task
skips what is already there, so a restore can be re-run safely.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass, field

import psycopg
from botocore.exceptions import ClientError

from blobgc import queries
from blobgc.objects import MAX_KEYS_PER_CALL, bucket_is_versioned, chunked
from blobgc.runs import RunRef

log = logging.getLogger(__name__)

ROW_SOURCES = {"app.blob"}  # sources whose deleted rows the log holds, and restore puts back
# Why the rows of each other source cannot be put back, in the words the report uses.
NOT_RESTORABLE_ROWS = {
    "app.blob": "app.blob rows deleted before blobgc logged row images (migration 0007) are not in the log; "
                "the objects are restored",
    "app.content": "app.content rows: the expired app.paste rows that referenced them are not in the log, and a "
                   "content row without its pastes would be expired again; the objects are restored",
    "app.image": "app.image rows: image rows are not kept in the log (their offer binding and hashes are gone); "
                 "the image files are restored",
    "gen.blob": "gen.blob rows: the references whose deletion made the blob collectable are not in the log, so a "
                "restored row would be collected again; the mail objects are restored",
    "media.staging": "no rows: seed 004's store has no database; the staging objects are restored",
    "media.thumbnails": "no rows: seed 004's store has no database; the thumbnails are restored",
}
RECONCILE_DAG = "blobgc_reconcile"


class RestoreRefused(Exception):
    """The restore cannot be done (unknown run, a dry run, an unversioned bucket); nothing was changed."""


@dataclass
class RestorePlan:
    source_dag_id: str
    source_run_id: str
    buckets: list[str]
    objects_deleted: int
    objects_owed: int
    rows_logged: int

    def as_xcom(self) -> dict:
        return asdict(self)


@dataclass
class RestoreResult:
    restored: int = 0
    already_restored: int = 0
    cancelled: int = 0
    not_restored: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def note(self, outcome: str, reason: str | None = None) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)
        if reason:
            self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def as_xcom(self) -> dict:
        return asdict(self)


def find_source_run(conn: psycopg.Connection, run_id: str, dag_id: str | None) -> tuple[str, str]:
    """The (dag_id, run_id) of the real run to undo; refuses an unknown, ambiguous or dry run."""
    rows = conn.execute(queries.load("restore/select_source_runs"), {"run_id": run_id, "dag_id": dag_id}).fetchall()
    real = [(d, r) for d, r, dry in rows if not dry]
    if not rows:
        raise RestoreRefused(f"no blobgc run has run_id {run_id!r}" + (f" in DAG {dag_id!r}" if dag_id else ""))
    if not real:
        raise RestoreRefused(f"run {run_id!r} was a dry run: it deleted nothing, so there is nothing to restore")
    if len(real) > 1:
        raise RestoreRefused(f"run_id {run_id!r} names runs of several DAGs ({', '.join(d for d, _ in real)}): "
                             "set the source_dag_id Param")
    return real[0]


def plan_restore(conn: psycopg.Connection, s3, run_id: str, dag_id: str | None = None) -> RestorePlan:
    """Check that the run can be undone (every bucket it deleted from is versioned) and size the work."""
    source_dag, source_run = find_source_run(conn, run_id, dag_id)
    row = conn.execute(queries.load("restore/summarize_run_log"), {"dag_id": source_dag, "run_id": source_run}
                       ).fetchone()
    buckets, deleted, owed, rows_logged = row[0] or [], row[1] or 0, row[2] or 0, row[3] or 0
    unversioned = []
    for bucket in buckets:
        try:
            versioned = bucket_is_versioned(s3, bucket)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code == "NoSuchBucket":
                raise RestoreRefused(f"bucket {bucket!r}, which run {source_run!r} deleted from, does not exist") \
                    from error
            raise
        if not versioned:
            unversioned.append(bucket)
    if unversioned:
        raise RestoreRefused(
            f"blobgc_restore refuses: bucket{'s' if len(unversioned) > 1 else ''} {', '.join(map(repr, unversioned))} "
            f"{'are' if len(unversioned) > 1 else 'is'} not versioned, so the objects {source_dag} run {source_run!r} "
            "deleted there are gone for good and no delete marker can be removed. Nothing was changed. To make "
            "later runs undoable, enable versioning first (aws s3api put-bucket-versioning --bucket NAME "
            "--versioning-configuration Status=Enabled) and expire noncurrent versions with a lifecycle rule.")
    return RestorePlan(source_dag, source_run, buckets, deleted, owed, rows_logged)


def cancel_owed_deletions(conn: psycopg.Connection, run: RunRef, plan: RestorePlan) -> RestoreResult:
    """Take the run's still-owed deletions out of the outbox: those objects were never deleted and now stay."""
    result = RestoreResult()
    if run.dry_run:
        result.cancelled = plan.objects_owed
        return result
    with conn.transaction():
        cancelled = conn.execute(queries.load("restore/cancel_owed_deletions"), {
            "restore_run_id": run.run_id, "dag_id": plan.source_dag_id, "run_id": plan.source_run_id}).fetchall()
    result.cancelled = len(cancelled)
    log.info("cancelled %d owed deletions of %s", result.cancelled, plan.source_run_id)
    return result


def restore_objects(conn: psycopg.Connection, s3, run: RunRef, plan: RestorePlan) -> RestoreResult:
    """Remove the delete marker of every object the run deleted, a DeleteObjects call per 1000 markers."""
    result = RestoreResult()
    pending = conn.execute(queries.load("restore/select_deleted_objects"), {
        "restore_run_id": run.run_id, "dag_id": plan.source_dag_id, "run_id": plan.source_run_id}).fetchall()
    by_bucket: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for bucket, key, version_id in pending:
        by_bucket[bucket].append((key, version_id))
    for bucket, items in by_bucket.items():
        no_marker = [key for key, version in items if not version]
        markers = [(key, version) for key, version in items if version]
        reason = ("no delete marker recorded for this key: it was deleted before blobgc recorded version ids, "
                  "or while the bucket was not versioned")
        for _ in no_marker:
            result.note("not_restored", reason)
        if not run.dry_run and no_marker:
            record_items(conn, run, plan, "object", bucket, [(k, None, "not_restored", reason) for k in no_marker])
        for chunk in chunked(markers, MAX_KEYS_PER_CALL):
            if run.dry_run:
                result.restored += len(chunk)
                continue
            response = s3.delete_objects(Bucket=bucket, Delete={
                "Objects": [{"Key": k, "VersionId": v} for k, v in chunk], "Quiet": False})
            errors = {(e.get("Key"), e.get("VersionId")): f"{e.get('Code')}: {e.get('Message', '')}".strip()
                      for e in response.get("Errors", [])}
            outcomes = []
            for key, version in chunk:
                error = errors.get((key, version)) or errors.get((key, None))
                if error is None:
                    outcomes.append((key, version, "restored", None))
                elif error.startswith("NoSuchVersion"):
                    outcomes.append((key, version, "already_restored", "the delete marker was already removed"))
                else:
                    outcomes.append((key, version, "not_restored", error))
            record_items(conn, run, plan, "object", bucket, outcomes)
            for _, _, outcome, detail in outcomes:
                result.note(outcome, detail if outcome == "not_restored" else None)
        log.info("%s %d objects in %s (%d without a recorded delete marker)",
                 "would restore" if run.dry_run else "restored", result.restored, bucket, len(no_marker))
    return result


def restore_rows(conn: psycopg.Connection, run: RunRef, plan: RestorePlan) -> RestoreResult:
    """Put back the rows the run's log holds (app.blob), and record why every other source's rows cannot come back."""
    result = RestoreResult()
    params = {"restore_run_id": run.run_id, "dag_id": plan.source_dag_id, "run_id": plan.source_run_id}
    if run.dry_run:
        result.restored = conn.execute(queries.load("restore/count_logged_blob_rows"), params).fetchone()[0]
    else:
        with conn.transaction():
            for _item, outcome in conn.execute(queries.load("restore/insert_blob_rows"), params).fetchall():
                result.note(outcome, "a row with this id exists again; it was left as it is"
                            if outcome == "not_restored" else None)
    for source, log_rows, objects in conn.execute(queries.load("restore/select_sources_without_rows"), params):
        if plan.source_dag_id == RECONCILE_DAG:
            reason = f"{source}: no rows to restore: reconcile deletes only orphan objects, which no row accounted for"
        else:
            reason = NOT_RESTORABLE_ROWS.get(source.split(" ")[0], f"{source}: this source's rows are not in the log")
        result.note("not_restored", f"{reason} ({objects} objects in {log_rows} log rows)")
        if not run.dry_run:
            record_items(conn, run, plan, "row", "", [(source, None, "not_restored", reason)])
    log.info("%s %d rows; not restorable: %s", "would restore" if run.dry_run else "restored", result.restored,
             result.reasons or "none")
    return result


def record_items(conn: psycopg.Connection, run: RunRef, plan: RestorePlan, kind: str, bucket: str,
                 outcomes: list[tuple[str, str | None, str, str | None]]) -> None:
    with conn.transaction():
        conn.cursor().executemany(queries.load("restore/insert_restore_item"), [
            {"restore_run_id": run.run_id, "source_dag_id": plan.source_dag_id, "source_run_id": plan.source_run_id,
             "kind": kind, "bucket": bucket, "item": item, "version_id": version, "outcome": outcome,
             "detail": detail}
            for item, version, outcome, detail in outcomes])


def summarize_restore(conn: psycopg.Connection, restore_run_id: str) -> dict:
    """Per kind and outcome, how many items this restore dealt with, and each distinct reason."""
    summary: dict[str, dict[str, int]] = defaultdict(dict)
    reasons: dict[str, int] = {}
    for kind, outcome, detail, n in conn.execute(queries.load("restore/summarize_restore"),
                                                 {"restore_run_id": restore_run_id}):
        summary[kind][outcome] = summary[kind].get(outcome, 0) + n
        if outcome == "not_restored" and detail:
            reasons[detail] = reasons.get(detail, 0) + n
    return {"items": dict(summary), "not_restored_because": reasons}
