"""A run's receipt page, drawn on the server in the reclaim page's look: presentation of
`blobgc.reclaim.receipts.collect_receipt` only. The one script is the "Undo this run" button's fetch, inline. While
the run is unfinished, the page opens with its progress and refreshes itself with a `<meta http-equiv="refresh">`
(no script); once the run has finished, it has neither."""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import quote

from blobgc.core.sizes import human_bytes
from blobgc.reclaim.page import PAGE_CSS, usd_text
from blobgc.reclaim.undo import UNDO_HEADER, UNDO_HEADER_VALUE

RECEIPT_CSS = """
.figures td.num{min-width:90px} .status-deleted{color:#006d2c} .status-owed,.status-unsettled{color:#b35806}
.status-planned{color:#0072B2} button#undo-button{font-size:14px;padding:6px 14px;background:#b30000;color:#fff;
border:0;border-radius:4px;cursor:pointer} button#undo-button[disabled]{background:#999}
.note{background:#fff8e1;border:1px solid #f0d98c;padding:6px 10px;font-size:13px;display:inline-block}
#progress-bar{width:420px;height:14px;vertical-align:middle}
"""


def e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def when(ts: str | None) -> str:
    return ts[:19].replace("T", " ") + " UTC" if ts else "—"


def receipt_path(root: str, dag_id: str, run_id: str) -> str:
    return f"{root}/runs/{quote(dag_id, safe='')}/{quote(run_id, safe='')}"


def receipt_json_path(root: str, dag_id: str, run_id: str) -> str:
    """The receipt as JSON (its `progress` included), for a dashboard."""
    return f"{root}/api/runs/{quote(dag_id, safe='')}/{quote(run_id, safe='')}"


def manifest_path(root: str, dag_id: str, run_id: str, fmt: str) -> str:
    return f"{root}/api/runs/{quote(dag_id, safe='')}/{quote(run_id, safe='')}/manifest.{fmt}"


def _row(label: str, value: str, key: str, raw: Any = None) -> str:
    data = f' data-value="{e(raw)}"' if raw is not None else ""
    return f'<tr data-field="{key}"{data}><th>{e(label)}</th><td>{value}</td></tr>'


def _run_table(r: dict[str, Any], root: str) -> str:
    run = r["run"]
    plan = e(r["plan_run_id"])
    if r["plan_from_other_run"]:
        plan = (
            f'<a id="plan-link" href="{e(receipt_path(root, run["dag_id"], r["plan_run_id"]))}">{plan}</a> '
            "(the dry run whose plan this run executed)"
        )
    rows = [
        _row("DAG", e(run["dag_id"]), "dag_id"),
        _row("run", f'<span class="run-id">{e(run["run_id"])}</span>', "run_id"),
        _row(
            "kind",
            "dry run (nothing deleted)" if run["dry_run"] else "real run",
            "dry_run",
            str(run["dry_run"]).lower(),
        ),
        _row("collections", e(", ".join(run["collections"]) or "—"), "collections"),
        _row("started", e(when(run["started_at"])), "started_at"),
        _row("finished", e(when(run["finished_at"]) if run["finished_at"] else "not finished"), "finished_at"),
        _row("plan", plan, "plan_run_id", r["plan_run_id"]),
        _row("read candidates from", _reads(run), "reads"),
        _row(
            "rows " + ("it would delete" if run["dry_run"] else "deleted"),
            f"{run['rows_deleted']:,}",
            "rows_deleted",
            run["rows_deleted"],
        ),
        _row(
            "objects " + ("it would delete" if run["dry_run"] else "deleted"),
            f'{run["objects_deleted"]:,} <span class="hint">({e(_objects_source(r))})</span>',
            "objects_deleted",
            run["objects_deleted"],
        ),
        _row(
            "bytes " + ("it would delete" if run["dry_run"] else "deleted"),
            f'{e(human_bytes(r["storage"]["bytes_deleted"]))} <span class="hint">(out of the buckets\' view: '
            "gone, in quarantine, or kept as noncurrent versions)</span>",
            "bytes_deleted",
            r["storage"]["bytes_deleted"],
        ),
        _row(
            "bytes " + ("it would reclaim" if run["dry_run"] else "reclaimed (gone from storage)"),
            f'{e(human_bytes(run["bytes_reclaimed"]))} <span class="hint">({run["bytes_reclaimed"]:,} bytes; '
            f"{e(_bytes_source(r))})</span>",
            "bytes_reclaimed",
            run["bytes_reclaimed"],
        ),
        _row(
            "monthly cost " + ("it would save" if run["dry_run"] else "saved"),
            f'<b>{e(usd_text(r["usd_per_month_saved"]))}</b> per month <span class="hint">(at '
            f"${r['usd_per_gb_month']:g} per GB-month, S3 Standard, Variable blobgc_storage_prices)</span>",
            "usd_per_month_saved",
            r["usd_per_month_saved"],
        ),
    ]
    return '<table id="run" class="figures">' + "".join(rows) + "</table>"


def _reads(run: dict[str, Any]) -> str:
    """Which connection each step read its candidates from (`blobgc.core.replica`), and the replica's lag."""
    reads: dict[str, dict[str, Any]] = run.get("reads") or {}
    if not reads:
        return '<span class="hint">no step of this run scanned for candidates</span>'
    by_connection: dict[str, list[str]] = {}
    for task_id, read in sorted(reads.items()):
        by_connection.setdefault(read.get("connection") or "?", []).append(task_id)
    text = "; ".join(f"{e(conn)} ({e(', '.join(tasks))})" for conn, tasks in sorted(by_connection.items()))
    if set(by_connection) == {"blobgc_postgres"}:
        return text + ' <span class="hint">(the primary)</span>'
    lag = run.get("replica_lag_seconds")
    if lag is not None:
        state = f"the replica was {lag:.1f} s behind when the run first read it"
    elif any(read.get("standby") for read in reads.values()):
        state = "the replica's lag is unknown: not streaming, or nothing replayed yet"
    else:
        state = "the replica's lag is unknown: not a standby"
    return f'{text} <span class="hint">({e(state)}; every deletion re-checked on blobgc_postgres)</span>'


def duration(seconds: float) -> str:
    """A length of time as a reader wants it: "45 s", "3 min 20 s", "2 h 5 min"."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _of_planned(done: int | None, left: int | None, planned: int, unit: str) -> str:
    if done is None or left is None:
        return f"{planned:,} {unit} planned so far"
    return f"<b>{done:,}</b> {unit} deleted so far, {left:,} left (planned: {planned:,})"


def refresh_meta(r: dict[str, Any]) -> str:
    """The page's self-refresh while the run is unfinished (`progress.refresh_seconds`); nothing once it has finished."""
    p = r.get("progress")
    if not p or p["finished"] or not p["refresh_seconds"]:
        return ""
    return f'<meta http-equiv="refresh" content="{int(p["refresh_seconds"])}">'


def _progress(r: dict[str, Any]) -> str:
    """An unfinished run's progress (`blobgc.reclaim.progress`): what it is doing, parts done and left, rows and objects
    deleted so far and left, the current rate and the estimated end; nothing once the run has finished."""
    p = r.get("progress")
    if not p or p["finished"]:
        return ""
    parts, rows, objects, rate = p["parts"], p["rows"], p["objects"], p["rate"]
    if parts["done"] is None:
        parts_text = f"{parts['total']:,} planned so far (a dry run only plans)"
    else:
        parts_text = f"<b>{parts['done']:,}</b> of {parts['total']:,} done, {parts['left']:,} left"
    parked = f" ({objects['parked']:,} of them parked: they wait for an operator)" if objects["parked"] else ""
    rate_text = (
        f"<b>{rate['objects_per_second']:,.1f}</b> objects/s dealt with ({rate['objects_deleted_per_second']:,.1f} "
        f"deleted/s), {rate['rows_per_second']:,.1f} rows/s, over the last {rate['window_seconds']:g} s"
        if rate
        else "—"
    )
    if p["eta"]:
        eta = f"<b>{e(when(p['eta']))}</b> (in {e(duration(p['eta_seconds']))})"
        if p.get("eta_of") == "rows":
            eta += ' <span class="hint">(the end of the execution; the owed objects are deleted after it)</span>'
    elif p["dry_run"]:
        eta = "— (a dry run only plans)"
    else:
        eta = "— (nothing is being deleted now, or nothing is left)"
    rows_html = [
        _row("doing", e(p["phase_text"]), "phase", p["phase"]),
        _row("parts of the plan", parts_text, "parts_done", parts["done"]),
        _row(
            "rows", _of_planned(rows["deleted"], rows["left"], rows["planned"], "rows"), "rows_deleted", rows["deleted"]
        ),
        _row(
            "objects",
            _of_planned(objects["deleted"], objects["left"], objects["planned"], "objects") + e(parked),
            "objects_deleted",
            objects["deleted"],
        ),
        _row(
            "objects left",
            f"{objects['left']:,}" if objects["left"] is not None else "—",
            "objects_left",
            objects["left"],
        ),
        _row("current rate", rate_text, "objects_per_second", rate["objects_per_second"] if rate else None),
        _row("estimated end", eta, "eta", p["eta"]),
        _row(
            "last activity",
            f"{e(when(p['last_activity_at']))} ({e(duration(p['idle_seconds']))} ago)",
            "last_activity_at",
            p["last_activity_at"],
        ),
    ]
    bar = ""
    if objects["planned"] and objects["left"] is not None:
        dealt = max(objects["planned"] - objects["left"], 0)
        bar = (
            f'<p><progress id="progress-bar" value="{dealt}" max="{objects["planned"]}"></progress> '
            f'<span class="hint">{dealt:,} of {objects["planned"]:,} planned objects dealt with</span></p>'
        )
    return (
        f'<h2>Progress</h2><table id="progress" class="figures" data-phase="{e(p["phase"])}" data-finished="false">'
        + "".join(rows_html)
        + "</table>"
        + bar
        + f'<p id="progress-refresh" class="hint">As of {e(when(p["as_of"]))}. This run has not finished: the page '
        f"refreshes itself every {p['refresh_seconds']} s (longer when the receipt is slow to build). Objects left: "
        "the keys of plan items not dealt with yet and the keys the run still owes; the rate counts the keys the "
        "drain dealt with (deleted, or found absent or kept); the estimated end is the objects left over that rate. "
        "A run idle for long has most likely stopped before its report task (see its Airflow run).</p>"
    )


def _objects_source(r: dict[str, Any]) -> str:
    """What the run's objects figure counts (blobgc.run, as blobgc.reclaim_daily)."""
    if r["run"]["dry_run"]:
        return "every key of its plan, whether or not the object exists" if r["figures"] else "keys it found"
    return "objects its drain deleted, whoever owed them; absent, kept and failed keys are not counted"


def _bytes_source(r: dict[str, Any]) -> str:
    """Where the run's bytes figure takes its sizes from (blobgc.run, as blobgc.reclaim_daily)."""
    if r["run"]["dry_run"]:
        f = r["figures"]
        return f"sizes from {f['size_source']}; unknown sizes not counted" if f else "sizes as logged"
    return f"sizes: {r['counted_size_source']}"


FIGURE_MEANINGS = {
    "planned": "every key of the plan",
    "deleted": "the drain deleted the object",
    "absent": "the object did not exist at delete time (a thumbnail never made, an object already gone)",
    "kept": "left in place: skipped at delete time (its row referenced or changed again since the plan), or kept by "
    "the drain's check (a row accounts for it again, or it was written again)",
    "failed": "still owed: the store refused it or the drain has not reached it yet (parked ones included)",
    "not_reached": "in plan items this run has not dealt with (the gate refused the plan, or the run stopped first)",
}


def _figures(r: dict[str, Any]) -> str:
    """The plan and what became of each of its keys: planned = deleted + absent + kept + failed, in keys and in the
    plan's bytes (one source, said), then the bytes the drain counted, which the run's own figures are."""
    f = r["figures"]
    if f is None:
        return _counts_table(r)
    if f["dry_run"]:
        return (
            f'<table id="counts" class="figures" data-balanced="true"><tr><th>planned</th><td class="num" '
            f'data-count="planned" data-value="{f["planned_keys"]}" data-bytes="{f["planned_bytes"]}">'
            f"{e(f['lines'][0])}</td></tr></table>"
        )
    source = (
        f'<p id="figures-source" class="hint">Bytes here are the plan&#39;s: sizes from {e(f["size_source"])}; '
        f"{f['unknown_size_keys']:,} planned keys of unknown size count 0.</p>"
    )
    shown = ["planned", "deleted", "absent", "kept", "failed"] + (["not_reached"] if f["not_reached_keys"] else [])
    rows = "".join(
        f'<tr><th>{e(name.replace("_", " "))}</th><td class="num" data-count="{name}" '
        f'data-value="{f[f"{name}_keys"]}" data-bytes="{f[f"{name}_bytes"]}">{f[f"{name}_keys"]:,}</td>'
        f'<td class="num">{e(human_bytes(f[f"{name}_bytes"]))}</td><td class="hint">{e(FIGURE_MEANINGS[name])}</td>'
        "</tr>"
        for name in shown
    )
    lines = "".join(f"<li>{e(line)}</li>" for line in f["lines"])
    return (
        f'<table id="counts" class="figures" data-balanced="{str(f["balanced"]).lower()}"><tr><th></th>'
        "<th>keys</th><th>bytes, as planned</th><th></th></tr>"
        + rows
        + "</table>"
        + source
        + f'<ul id="figures-lines">{lines}</ul>'
    )


def _counts_table(r: dict[str, Any]) -> str:
    c = r["counts"]
    planned = "—" if c["planned_objects"] is None else f"{c['planned_objects']:,} objects, {c['planned_rows']:,} rows"
    cells = [
        ("planned", planned, c["planned_objects"]),
        ("deleted", f"{c['deleted_objects']:,} objects, {c['deleted_rows']:,} rows", c["deleted_objects"]),
        (
            "skipped (referenced again, or changed, since the plan)",
            f"{c['skipped_objects']:,} objects, {c['skipped_rows']:,} rows",
            c["skipped_objects"],
        ),
        (
            "failed (still owed; parked ones included)",
            f"{c['failed']:,}" + (f" ({c['parked']:,} parked)" if c["parked"] else ""),
            c["failed"],
        ),
    ]
    return (
        '<table id="counts" class="figures"><tr><th>planned</th><th>deleted</th><th>skipped</th><th>failed</th>'
        "</tr><tr>"
        + "".join(
            f'<td class="num" data-count="{k.split()[0]}" data-value="{e(raw)}" title="{e(k)}">{e(text)}</td>'
            for k, text, raw in cells
        )
        + "</tr></table>"
    )


# The columns of "Considered but not planned" that blobgc's reports record, in this order: (heading, what it means).
# Any other key a report records follows them, as it is.
NOT_PLANNED_COLUMNS = {
    "considered": ("considered", "rows (or keys) the run looked at"),
    "planned": ("planned", "in the plan"),
    "accounted": ("accounted for", "a row of the collection forms the key"),
    "referenced": ("referenced", "a reference points at the row"),
    "not_marked": (
        "not marked yet",
        "no mark has found the row unused yet: run blobgc_mark first; the grace counts from the first mark",
    ),
    "within_grace": ("within grace", "unused, but for less than the grace"),
    "young_created_at": ("created within grace", "created less than the grace ago (created_at)"),
    "too_young": ("too young", "younger than the age floor"),
    "first_eligible_at": (
        "first eligible at",
        "when the first of those waiting out the grace or the floor becomes eligible",
    ),
    "grace_hours": ("grace (hours)", "the grace the run applied"),
}


def _not_planned_cell(key: str, value: Any) -> str:
    if value is None:
        shown = "—"
    elif isinstance(value, str) and key.endswith("_at"):
        shown = when(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        shown = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
    else:
        shown = str(value)
    raw = "" if value is None else value
    return f'<td class="num" data-key="{e(key)}" data-value="{e(raw)}">{e(shown)}</td>'


def _not_planned(r: dict[str, Any]) -> str:
    """What the run considered and did not plan, per collection, and why (its report's `not_planned`), whatever keys
    the DAG's report records."""
    entries = {name: counts for name, counts in (r.get("not_planned") or {}).items() if isinstance(counts, dict)}
    if not entries:
        return ""
    seen = {k for counts in entries.values() for k in counts}
    keys = [k for k in NOT_PLANNED_COLUMNS if k in seen] + sorted(seen - set(NOT_PLANNED_COLUMNS))
    labels = {k: NOT_PLANNED_COLUMNS.get(k, (k.replace("_", " "), ""))[0] for k in keys}
    head = "".join(f'<th title="{e(NOT_PLANNED_COLUMNS.get(k, ("", ""))[1])}">{e(labels[k])}</th>' for k in keys)
    rows = "".join(
        f'<tr data-collection="{e(name)}"><td>{e(name)}</td>'
        + "".join(_not_planned_cell(k, counts.get(k)) for k in keys)
        + "</tr>"
        for name, counts in sorted(entries.items())
    )
    meanings = "; ".join(f"{labels[k]}: {NOT_PLANNED_COLUMNS[k][1]}" for k in keys if k in NOT_PLANNED_COLUMNS)
    return (
        "<h2>Considered but not planned</h2>"
        f'<table id="not-planned"><tr><th>collection</th>{head}</tr>{rows}</table>'
        f'<p id="not-planned-meanings" class="hint">{e(meanings)}.</p>'
    )


def _gate(gate: dict[str, Any] | None) -> str:
    if not gate:
        return '<p id="gate-none" class="hint">This run did not meet the gate (a dry run, or a run from before it).</p>'
    judgement = gate["judgement"] or {}
    settings = judgement.get("settings") or {}
    rule = (
        (
            f"waits past {settings.get('ratio', '?')}× the median of the last {settings.get('history', '?')} real runs "
            f"and past the floors ({settings.get('min_objects', 0):,} objects or rows, "
            f"{human_bytes(int(settings.get('min_bytes', 0)))}): Variable blobgc_gate"
        )
        if settings
        else ""
    )
    scopes = "".join(
        f'<tr data-scope="{e(s.get("scope"))}" data-exceeds="{str(bool(s.get("exceeds"))).lower()}">'
        f'<td>{e(s.get("scope"))}</td><td class="num">{int(s.get("planned_objects", 0)):,}</td>'
        f'<td class="num">{int(s.get("planned_rows", 0)):,}</td>'
        f'<td class="num">{e(human_bytes(int(s.get("planned_bytes", 0))))}</td>'
        f'<td class="num">{int(s.get("history_runs", 0)):,}</td>'
        f'<td class="num">{float(s.get("median_objects", 0)):,.0f} · {float(s.get("median_rows", 0)):,.0f} · '
        f"{e(human_bytes(int(s.get('median_bytes', 0))))}</td>"
        f'<td class="num">{float(s.get("threshold_objects", 0)):,.0f} · {float(s.get("threshold_rows", 0)):,.0f} · '
        f"{e(human_bytes(int(s.get('threshold_bytes', 0))))}</td>"
        f"<td>{'<b>exceeded</b>' if s.get('exceeds') else 'within'}</td></tr>"
        for s in judgement.get("scopes") or []
    )
    table = (
        (
            '<table id="gate-scopes"><tr><th>scope</th><th>planned objects</th><th>planned rows</th>'
            "<th>planned bytes</th><th>past runs</th><th>median (objects · rows · bytes)</th>"
            "<th>threshold (objects · rows · bytes)</th><th></th></tr>"
            f"{scopes}</table>"
        )
        if scopes
        else ""
    )
    return (
        f'<table id="gate" class="figures" data-decision="{e(gate["decision"])}">'
        f"<tr><th>decision</th><td><b>{e(gate['decision'])}</b></td></tr>"
        f"<tr><th>by</th><td>{e(gate['decided_by'] or '—')}</td></tr>"
        f"<tr><th>when</th><td>{e(when(gate['decided_at']))}</td></tr>"
        f"<tr><th>planned</th><td>{gate['planned_objects']:,} objects, {gate['planned_rows']:,} rows, "
        f"{e(human_bytes(gate['planned_bytes']))}</td></tr>"
        f'<tr><th>rule</th><td class="hint">{e(rule)}</td></tr></table>{table}'
    )


def _table(table_id: str, headings: list[str], rows: list[str]) -> str:
    """A table of ready rows, or one cell saying there are none."""
    head = "".join(f"<th>{e(h)}</th>" for h in headings)
    body = "".join(rows) or f'<tr><td colspan="{len(headings)}" class="none">no keys</td></tr>'
    return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'


def _keys_source(r: dict[str, Any]) -> str:
    """Which keys the status and prefix tables count, and where their bytes come from."""
    if r["run"]["dry_run"]:
        return "Every key of the plan; bytes are the plan's sizes (unknown sizes count 0)."
    return (
        "The keys this run owed (planned keys skipped before they were owed are not here); bytes are the sizes "
        "logged with each key when it was owed (unknown sizes count 0), not what the drain counted."
    )


def _statuses(r: dict[str, Any]) -> str:
    return _table(
        "statuses",
        ["status", "objects", "bytes (as logged)"],
        [
            f'<tr data-status="{e(s["status"])}" data-objects="{s["objects"]}" data-bytes="{s["bytes"]}">'
            f'<td class="status-{e(s["status"])}">{e(s["status"])}</td><td class="num">{s["objects"]:,}</td>'
            f'<td class="num">{e(human_bytes(s["bytes"]))}</td></tr>'
            for s in r["statuses"]
        ],
    )


def _prefixes(r: dict[str, Any]) -> str:
    return _table(
        "prefixes",
        ["prefix", "objects", "bytes", "deleted"],
        [
            f'<tr data-prefix="{e(p["prefix"])}" data-objects="{p["objects"]}" data-bytes="{p["bytes"]}">'
            f'<td class="run-id">{e(p["prefix"])}</td><td class="num">{p["objects"]:,}</td>'
            f'<td class="num" title="{p["bytes"]} bytes">{e(human_bytes(p["bytes"]))}</td>'
            f'<td class="num">{p["deleted"]:,}</td></tr>'
            for p in r["by_prefix"]
        ],
    )


def _sample(r: dict[str, Any]) -> str:
    return _table(
        "sample-keys",
        ["bucket", "key", "size", "status", "deleted at", "delete marker"],
        [
            f'<tr data-key="{e(k["key"])}" data-status="{e(k["status"])}"><td>{e(k["bucket"])}</td>'
            f'<td class="run-id">{e(k["key"])}</td><td class="num">{e(human_bytes(k["size_bytes"]))}</td>'
            f'<td class="status-{e(k["status"])}">{e(k["status"])}</td><td>{e(when(k["deleted_at"]))}</td>'
            f'<td class="run-id">{e(k["version_id"] or "")}</td></tr>'
            for k in r["sample_keys"]
        ],
    )


def _restore(r: dict[str, Any], states: dict[str, dict[str, Any]]) -> str:
    requests, items = r["restore"]["requests"], r["restore"]["items"]
    if not requests and not items:
        return '<p id="restore-none" class="hint">Nobody has undone this run.</p>'
    out = []
    if requests:
        out.append(
            '<table id="undo-requests"><tr><th>restore run</th><th>asked by</th><th>asked at</th>'
            "<th>state</th><th>finished</th></tr>"
        )
        for u in requests:
            airflow = states.get(u["restore_run_id"], {})
            state = airflow.get("state") or ("finished" if u["finished_at"] else "waiting")
            finished = u["finished_at"] or airflow.get("end_date")
            out.append(
                f'<tr data-restore-run="{e(u["restore_run_id"])}" data-state="{e(state)}">'
                f'<td class="run-id"><a href="/dags/blobgc_restore/runs/{quote(u["restore_run_id"], safe="")}"'
                f' target="_top">{e(u["restore_run_id"])}</a></td><td>{e(u["requested_by"])}</td>'
                f"<td>{e(when(u['requested_at']))}</td><td>{e(state)}</td>"
                f"<td>{e(when(finished))}</td></tr>"
            )
        out.append("</table>")
    if items:
        out.append(
            '<table id="restore-items"><tr><th>restore run</th><th>kind</th><th>outcome</th><th>items</th>'
            "<th>last</th></tr>"
        )
        for i in items:
            out.append(
                f'<tr data-kind="{e(i["kind"])}" data-outcome="{e(i["outcome"])}" data-items="{i["items"]}">'
                f'<td class="run-id">{e(i["restore_run_id"])}</td><td>{e(i["kind"])}</td>'
                f'<td>{e(i["outcome"])}</td><td class="num">{i["items"]:,}</td>'
                f"<td>{e(when(i['last_at']))}</td></tr>"
            )
        out.append("</table>")
    return "".join(out)


UNDO_SCRIPT = """
<script>
document.getElementById('undo-button').addEventListener('click', async (ev) => {
  const button = ev.currentTarget, out = document.getElementById('undo-result');
  if (!confirm('Undo this run? blobgc_restore will bring back its objects (versioned buckets only).')) return;
  button.disabled = true; out.textContent = 'Triggering blobgc_restore…';
  try {
    const r = await fetch(button.dataset.url, {method: 'POST', credentials: 'same-origin',
                          headers: {'%(header)s': '%(value)s', 'Accept': 'application/json'}});
    const body = await r.json().catch(() => ({}));
    if (!r.ok) { out.textContent = 'Refused (' + r.status + '): ' + (body.detail || r.statusText); button.disabled = false; return; }
    out.dataset.restoreRunId = body.restore_run_id;
    out.textContent = 'blobgc_restore run ' + body.restore_run_id + ' triggered. ' + (body.message || '');
  } catch (err) { out.textContent = 'Failed: ' + err; button.disabled = false; }
});
</script>""" % {"header": UNDO_HEADER, "value": UNDO_HEADER_VALUE}


def _storage(r: dict[str, Any]) -> str:
    """Where the deleted bytes are: reclaimed, waiting in quarantine, or kept as noncurrent versions (and until when)."""
    truth, parts = r["storage"], []
    held = truth["quarantine"]
    if held:
        parts.append(
            f'<p id="quarantine">{held["objects"]:,} objects ({e(human_bytes(held["bytes"]))}) went into quarantine '
            f"for {held['days']} days: {held['held']:,} held ({e(human_bytes(held['bytes_held']))}"
            + (f", until {e(when(held['last_expiry']))} at the latest" if held["last_expiry"] else "")
            + f"), {held['purged']:,} purged ({e(human_bytes(held['bytes_purged']))}, counted as reclaimed then), "
            f'{held["restored"]:,} brought back by an undo. <span class="hint">Cost: '
            f"{e(usd_text(truth['usd_copy_requests']))} of copy requests, and "
            f"{e(usd_text(truth['usd_quarantine_storage']))} of storage while they wait.</span></p>"
        )
    for b in truth["buckets"]:
        if b["delete_markers"]:
            parts.append(
                f'<p class="delete-markers" data-bucket="{e(b["bucket"])}" data-markers="{b["delete_markers"]}">'
                f"<b>{e(b['bucket'])}</b>: {b['delete_markers']:,} delete markers left, each an expired-object delete "
                "marker once its noncurrent version expires: "
                + (
                    "the bucket's lifecycle rule removes them."
                    if b["expired_markers"]
                    else "no rule removes them (add ExpiredObjectDeleteMarker to a lifecycle rule)."
                )
                + "</p>"
            )
        if not b["bytes_noncurrent"]:
            continue
        if b["keeps_every_version"]:
            parts.append(
                f'<p class="warning keeps-every-version" data-bucket="{e(b["bucket"])}"><b>{e(b["bucket"])}</b>: '
                f"{e(b['warning'])}. {e(human_bytes(b['bytes_noncurrent']))} deleted here are still stored. Add a "
                f"rule, e.g.: <code>{e(b['suggested_rule'])}</code></p>"
            )
        else:
            parts.append(
                f'<p class="noncurrent" data-bucket="{e(b["bucket"])}"><b>{e(b["bucket"])}</b> is versioned: '
                f"{e(human_bytes(b['bytes_noncurrent']))} deleted here stay stored as noncurrent versions until "
                f"its lifecycle rule expires them after {b['noncurrent_days']} days: freed by "
                f"{e(when(b['freed_by']))}.</p>"
            )
    if not parts:
        return (
            '<p id="storage-none" class="hint">Every byte deleted is reclaimed: nothing waits in quarantine, and '
            "no versioned bucket keeps a noncurrent version of it.</p>"
        )
    return '<div id="storage">' + "".join(parts) + "</div>"


def _undo(r: dict[str, Any], root: str, may_undo: bool, paused: bool | None) -> str:
    run = r["run"]
    if run["dry_run"]:
        return '<p id="undo-none" class="hint">A dry run deleted nothing: there is nothing to undo.</p>'
    if not r["undoable"]:
        return (
            '<p id="undo-none" class="hint">This run cannot be undone: its deletions left no version ids and '
            "nothing of it waits in quarantine (the bucket was not versioned and had no quarantine, its quarantine "
            "was purged, or nothing was deleted), so blobgc_restore cannot bring the bytes back.</p>"
        )
    if not may_undo:
        return (
            '<p id="undo-none" class="hint">Undoing this run needs permission to trigger blobgc_restore, which '
            "your Airflow user does not have.</p>"
        )
    url = f"{root}/api/runs/{quote(run['dag_id'], safe='')}/{quote(run['run_id'], safe='')}/undo"
    note = (
        (
            '<p id="restore-paused" class="note">blobgc_restore is paused: an undo pressed now is queued and '
            "waits until someone unpauses blobgc_restore in Airflow.</p>"
        )
        if paused
        else ""
    )
    return (
        f'<p><button id="undo-button" type="button" data-url="{e(url)}">Undo this run</button> '
        '<span class="hint">triggers blobgc_restore for this run as you: it copies back what waits in '
        "quarantine, removes the delete markers this run left, and puts back the rows it can.</span></p>"
        f'{note}<p id="undo-result" class="hint" aria-live="polite"></p>{UNDO_SCRIPT}'
    )


def render_receipt(
    r: dict[str, Any],
    *,
    root: str,
    may_undo: bool,
    paused: bool | None,
    restore_states: dict[str, dict[str, Any]] | None = None,
) -> str:
    """The whole receipt page of one run."""
    run = r["run"]
    title = f"{run['dag_id']} {run['run_id']}"
    csv_href, json_href = (manifest_path(root, run["dag_id"], run["run_id"], f) for f in ("csv", "json"))
    kind = "dry" if run["dry_run"] else "real"
    return "".join(
        [
            f"<!doctype html><html><head><meta charset='utf-8'>{refresh_meta(r)}<title>blobgc receipt {e(title)}</title>",
            f"<style>{PAGE_CSS}{RECEIPT_CSS}</style></head>",
            f'<body data-dag-id="{e(run["dag_id"])}" data-run-id="{e(run["run_id"])}" data-kind="{kind}">',
            f'<p class="hint"><a href="{e(root)}/reclaim">← storage reclaim</a> · <a id="receipt-json" '
            f'href="{e(receipt_json_path(root, run["dag_id"], run["run_id"]))}">this receipt as JSON</a></p>',
            f'<h1>Receipt: <span class="run-id">{e(title)}</span></h1>',
            _progress(r),
            _run_table(r, root),
            "<h2>Where the deleted bytes are</h2>",
            _storage(r),
            "<h2>Planned, and what became of each key</h2>",
            _figures(r),
            _not_planned(r),
            "<h2>The gate</h2>",
            _gate(r["gate"]),
            "<h2>Keys by status</h2>",
            f'<p id="keys-source" class="hint">{e(_keys_source(r))}</p>',
            _statuses(r),
            "<h2>Bytes by prefix</h2>",
            _prefixes(r),
            f"<h2>A sample of keys (first {len(r['sample_keys'])})</h2>",
            _sample(r),
            '<h2>The full manifest</h2><p id="manifest">Every key of this run, with its size and status: '
            f'<a id="manifest-csv" href="{e(csv_href)}" download>CSV</a> · '
            f'<a id="manifest-json" href="{e(json_href)}" download>JSON</a></p>',
            "<h2>Undo</h2>",
            _undo(r, root, may_undo, paused),
            '<h2>Restore</h2><div id="restore">',
            _restore(r, restore_states or {}),
            "</div>",
            "</body></html>",
        ]
    )


def render_not_found(dag_id: str, run_id: str, root: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>blobgc receipt: no such run</title>"
        f"<style>{PAGE_CSS}</style></head><body><h1>No such run</h1>"
        f'<p id="not-found">blobgc has no run <span class="run-id">{e(run_id)}</span> of '
        f'<span class="run-id">{e(dag_id)}</span>.</p>'
        f'<p class="hint"><a href="{e(root)}/reclaim">← storage reclaim</a></p></body></html>'
    )


def render_forbidden(dag_id: str, root: str) -> str:
    """The receipt page's answer to a user who may not read runs of `dag_id`: it says nothing about its runs."""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>blobgc receipt: not allowed</title>"
        f"<style>{PAGE_CSS}</style></head><body><h1>Not allowed</h1>"
        f'<p id="forbidden">You may not read runs of <span class="run-id">{e(dag_id)}</span>, so blobgc shows '
        "you none of its receipts. Ask an Airflow administrator for read access to that DAG's runs.</p>"
        f'<p class="hint"><a href="{e(root)}/reclaim">← storage reclaim</a></p></body></html>'
    )
