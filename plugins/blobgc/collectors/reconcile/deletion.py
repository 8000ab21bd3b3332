"""Bucket-vs-database reconciliation as a planned deletion of objects alone (`blobgc.engine.Deletion`), which
`blobgc_reconcile` is built from: the run's shards (a prefix of a bucket, or a key range of one, or a bucket's
newest inventory report), each reconciled by its own task into the plan; the engine owes the planned orphans after
the gate and the drain deletes them, checking each again. An orphan is planned once `confirmations` consecutive
real runs found it orphaned (`blobgc.collectors.reconcile.sightings`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from blobgc.collectors.reconcile import from_inventory, listing, report
from blobgc.collectors.reconcile.planning import run_shards
from blobgc.collectors.reconcile.shards import Shard, ShardResult
from blobgc.core.collections import CollectionSource
from blobgc.core.replica import reading
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef
from blobgc.core.scratch import LEFT_FOR, Location, default_location, delete_tree, run_folder
from blobgc.engine import Deletion, Reported, Tasks, Work


@dataclass(frozen=True)
class Reconcile(Deletion):
    """`collections` is where the run's collections come from (the collections file, in a DAG); `bucket_origin`
    names what points at the seeds' bucket, and `inventory_destinations` where each bucket's inventory reports are
    (Variables, in a DAG)."""

    collections: CollectionSource
    bucket_origin: Callable[[], str]
    inventory_destinations: Callable[[], dict[str, str]]
    scratch_location: Callable[[], str | None] = lambda: None  # Variable blobgc_scratch (blobgc.core.scratch)

    tasks = Tasks(shards="plan_shards", plan="reconcile_shard")
    reported = Reported(planned={"shards": ShardResult})
    lists_objects = True
    labels = {
        "reconcile_shard": "{% set s = task.op_kwargs['shard'] %}"
        "{% if s['inventory'] %}inventory of {{ s['bucket'] }}"
        "{% if s['parts'] %}, part {{ s['part'] + 1 }}/{{ s['parts'] }}{% endif %}{% else %}"
        "{{ s['collection'] ~ ': ' if s['collection'] else '' }}"
        "{{ s['prefix'] or '(top level)' }}"
        "{% if s['lo'] or s['hi'] %} [{{ s['lo'] or '…' }}, "
        "{{ s['hi'] or '…' }}){% endif %}{% endif %}"
    }

    def check(self, work: Work) -> None:
        self.collections.checked(work.conn, work.params, index_warnings=True)

    def shards(self, work: Work, prepared: dict[str, Any] | None) -> list[dict[str, Any]]:
        collections = self.collections.checked(work.conn, work.params)
        found = run_shards(
            work.conn,
            work.s3,
            self.collections.store(work.s3),
            self.collections.bucket(),
            collections,
            work.params,
            reference_time=work.run.reference_time,
            destinations=self.inventory_destinations(),
            bucket_variable=self.bucket_origin(),
        )
        if work.params["source"] == "inventory":
            found = self.inventory_parts(work, collections, found)
        return [shard.to_xcom() for shard in found]

    def inventory_parts(self, work: Work, collections: list, reports: list[Shard]) -> list[Shard]:
        """Each bucket's report and formed keys written once into part files by hash, in the scratch location: one
        shard per part (`from_inventory.prepare_parts`). What earlier runs of the DAG left there goes first."""
        chosen = self.scratch_location()
        cleaned: set[Location] = set()
        parts: list[Shard] = []
        for shard in reports:
            report_at = Location.parse(shard.inventory, origin="the report's location")
            root = Location.parse(chosen) if chosen else default_location(report_at.scheme, report_at.bucket)
            if root not in cleaned:
                cleaned.add(root)
                mine = run_folder(root, work.run.dag_id, work.run.run_id).prefix
                left_before = datetime.now(UTC) - LEFT_FOR  # a failed run's parts may be run again until then
                delete_tree(work.s3, root.below(work.run.dag_id), keep=mine, written_before=left_before)
            with reading(work.reads, work.conn) as read:  # the formed keys stream from the replica when one is set
                parts += from_inventory.prepare_parts(
                    work.conn,
                    work.s3,
                    work.run,
                    self.inventory_scope(work, shard, collections),
                    shard.inventory,
                    scratch=root,
                    max_age_hours=work.params["max_inventory_age_hours"],
                    part_rows=work.params.get("inventory_part_keys") or from_inventory.PART_ROWS,
                    read=read,
                )
        return parts

    def plan(self, work: Work, shard: dict[str, Any], prepared: dict[str, Any] | None) -> TaskResult:
        part = Shard.from_xcom(shard)
        cutoff = work.cutoff(hours=work.params["min_age_hours"])
        if part.inventory and part.parts:  # its formed keys were read into the part files (`inventory_parts`)
            return self.reconcile_part(work, part, cutoff)
        with reading(work.reads, work.conn) as read:  # the replica when one is set: the primary re-checks
            return self.reconcile(work, part, cutoff, read)

    def reconcile(self, work: Work, part: Shard, cutoff: datetime, read: psycopg.Connection) -> TaskResult:
        """Reconcile one shard from a listing, or one bucket from its inventory in one task, its candidate keys read
        on `read` and every finding re-checked on the primary."""
        bucket, store = self.collections.bucket(), self.collections.store(work.s3)
        if part.inventory:  # a shard planned before parts were mapped: the bucket in one task
            return from_inventory.reconcile_from_inventory(
                work.conn,
                store,
                work.s3,
                work.run,
                self.inventory_scope(work, part),
                part.inventory,
                cutoff=cutoff,
                max_age_hours=work.params["max_inventory_age_hours"],
                confirmations=work.params["confirmations"],
                read=read,
            )
        return listing.reconcile_shard(
            work.conn,
            store,
            work.run,
            part,
            bucket=bucket,
            cutoff=cutoff,
            confirmations=work.params["confirmations"],
            collection=self.collections.one(work.conn, part.collection) if part.collection else None,
            bucket_origin=self.bucket_origin(),
            read=read,
        )

    def reconcile_part(self, work: Work, part: Shard, cutoff: datetime) -> TaskResult:
        """One part of a bucket's inventory: the part files against each other (no database scan), the leftovers
        checked on the primary."""
        return from_inventory.reconcile_inventory_part(
            work.conn,
            self.collections.store(work.s3),
            work.s3,
            work.run,
            self.inventory_scope(work, part),
            part,
            cutoff=cutoff,
            confirmations=work.params["confirmations"],
            threads=work.params.get("inventory_part_threads") or None,
        )

    def inventory_scope(self, work: Work, part: Shard, collections: list | None = None) -> from_inventory.Scope:
        """What the run reconciles in the bucket of inventory shard `part` (its `collections`, checked, if known)."""
        return from_inventory.scope_of(
            work.conn,
            self.collections.bucket(),
            collections if collections is not None else self.collections.checked(work.conn, work.params),
            part.bucket or self.collections.bucket(),
            seeds=not work.params["collections"],
            prefixes=work.params["prefixes"],
        )

    def summaries(self) -> dict[str, Callable[[psycopg.Connection, RunRef], dict[str, Any]]]:
        return {"reconcile": report.summarize, "not_planned": report.not_planned}
