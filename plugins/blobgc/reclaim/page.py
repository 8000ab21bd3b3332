"""The storage reclaim page, drawn on the server: SVG charts and HTML tables, no script, no CDN.

Presentation only: the figures come from `blobgc.reclaim.report.collect_report`.
"""

from __future__ import annotations

import html
from datetime import date, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from blobgc.core.sizes import GIB, human_bytes

PALETTE = [
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#332288",
    "#882255",
    "#44AA99",
    "#999933",
    "#AA4499",
]
METRICS = {"bytes_reclaimed": "Bytes reclaimed", "objects_deleted": "Objects deleted"}
USD_METRIC = "usd_per_month_saved"  # bytes reclaimed, priced at S3 Standard per GB-month (blobgc.storage_price)
LABELS = {**METRICS, USD_METRIC: "Monthly storage cost saved (USD)"}


def usd_text(amount: float) -> str:
    """Dollars as a reader wants them: cents when there are any, else enough digits to show a small figure."""
    if amount >= 0.01 or amount == 0:
        return f"${amount:,.2f}"
    return f"${amount:.6f}" if amount >= 0.000001 else "< $0.000001"


def chart_series(report: dict[str, Any], metric: str) -> tuple[list[str], list[str], dict[tuple[str, str], float]]:
    """The days of the window, the DAGs with real reclaim in it, and the value of each (day, DAG) segment; in
    dollars, the bytes reclaimed priced at the report's `usd_per_gb_month`."""
    start, end = date.fromisoformat(report["since"]), date.fromisoformat(report["until"])
    days = [(start + timedelta(days=i)).isoformat() for i in range((end - start).days + 1)]
    values: dict[tuple[str, str], float] = {}
    price = float(report["usd_per_gb_month"])
    for r in report["daily"]:
        figure = r["bytes_reclaimed"] if metric == USD_METRIC else r[metric]
        if not r["dry_run"] and figure:
            value = int(figure) / GIB * price if metric == USD_METRIC else int(figure)
            values[(r["day"], r["dag_id"])] = values.get((r["day"], r["dag_id"]), 0) + value
    dags = sorted({dag for _, dag in values})
    return days, dags, values


def render_chart_svg(
    report: dict[str, Any], metric: str, colours: dict[str, str], *, width: int = 900, height: int = 260
) -> str:
    """A stacked bar per day of `metric` over real runs, one segment per DAG; each segment carries its figures."""
    days, dags, values = chart_series(report, metric)
    left, right, top, bottom = 70, 10, 10, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = {d: sum(values.get((d, dag), 0) for dag in dags) for d in days}
    peak = max(totals.values(), default=0)
    fmt = {"bytes_reclaimed": human_bytes, USD_METRIC: usd_text}.get(metric, lambda n: f"{n:,}")
    slot = plot_w / max(len(days), 1)
    bar_w = max(slot * 0.7, 1.0)
    label = LABELS[metric]
    out = [
        f'<svg class="chart" data-metric="{metric}" data-peak="{peak}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{html.escape(label)} per day">'
    ]
    out.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#888"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#888"/>')
    out.append(f'<text x="{left - 6}" y="{top + 10}" text-anchor="end" font-size="11">{html.escape(fmt(peak))}</text>')
    out.append(f'<text x="{left - 6}" y="{top + plot_h}" text-anchor="end" font-size="11">0</text>')
    for i, d in enumerate(days):
        x = left + i * slot + (slot - bar_w) / 2
        y: float = top + plot_h
        for dag in dags:
            v = values.get((d, dag), 0)
            if not v:
                continue
            h = plot_h * v / peak
            y -= h
            out.append(
                f'<rect class="bar" data-day="{d}" data-dag="{html.escape(dag)}" data-value="{v}" '
                f'x="{x:.2f}" y="{y:.2f}" width="{bar_w:.2f}" height="{h:.2f}" fill="{colours[dag]}">'
                f"<title>{d} {html.escape(dag)}: {html.escape(fmt(v))}</title></rect>"
            )
        if len(days) <= 14 or i % max(len(days) // 10, 1) == 0 or i == len(days) - 1:
            out.append(
                f'<text x="{x + bar_w / 2:.2f}" y="{top + plot_h + 16}" text-anchor="middle" '
                f'font-size="10">{d[5:]}</text>'
            )
    if not peak:
        out.append(
            f'<text x="{left + plot_w / 2}" y="{top + plot_h / 2}" text-anchor="middle" font-size="13" '
            f'fill="#666">nothing reclaimed by a real run in this window</text>'
        )
    out.append("</svg>")
    return "".join(out)


def dag_colours(report: dict[str, Any]) -> dict[str, str]:
    dags = sorted({r["dag_id"] for r in report["daily"]} | {e["dag_id"] for e in report["last_runs"]})
    return {dag: PALETTE[i % len(PALETTE)] for i, dag in enumerate(dags)}


def _cells(*values: Any) -> str:
    return "".join(f"<td>{html.escape(str(v))}</td>" for v in values)


def _run_cell(runs: list[dict[str, Any]]) -> str:
    if not runs:
        return '<td class="none">no run yet</td>'
    r = runs[0]
    state = "finished " + r["finished_at"][:16].replace("T", " ") if r["finished_at"] else "not finished"
    older = f'<div class="older">and {len(runs) - 1} earlier</div>' if len(runs) > 1 else ""
    return (
        f'<td><div class="run-id">{html.escape(r["run_id"])}</div><div>{html.escape(state)}</div>'
        f"<div>{r['rows_deleted']:,} rows · {r['objects_deleted']:,} objects · "
        f"{html.escape(human_bytes(r['bytes_reclaimed']))}</div>{older}</td>"
    )


PAGE_CSS = """
body{font-family:system-ui,sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:20px} h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4} td.num{text-align:right} .run-id{font-family:monospace;font-size:12px}
.older,.none,.hint{color:#666;font-size:12px} .legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
.unit-toggle{font-size:13px;margin:18px 0 0} .unit-toggle label{margin-right:14px;cursor:pointer} .unit-toggle h2{font-size:16px}
.panel-usd{display:none} #unit-usd:checked ~ .panel-usd{display:block} #unit-usd:checked ~ .panel-bytes{display:none}
"""


def collection_filter(report: dict[str, Any]) -> str:
    """Links that filter the daily figures by collection (docs/reference.md §6); the current choice is not a link."""
    current = report.get("collection")
    choices = [(None, "all")] + [(c, c) for c in report.get("collections", [])]
    if current and current not in report.get("collections", []):
        choices.append((current, current))
    links = []
    for value, label in choices:
        if value == current:
            links.append(f'<b data-collection="{html.escape(value or "")}">{html.escape(label)}</b>')
        else:
            href = "?" + urlencode({"days": report.get("days", 30), **({"collection": value} if value else {})})
            links.append(
                f'<a href="{html.escape(href)}" data-collection="{html.escape(value or "")}">{html.escape(label)}</a>'
            )
    return f'<p id="collections" class="hint">Collection: {" | ".join(links)}</p>'


def recent_runs_table(report: dict[str, Any]) -> str:
    """The most recent runs, newest first, each linking to its receipt (relative: /blobgc/runs/...)."""
    price = float(report["usd_per_gb_month"])
    out = [
        '<h2>Recent runs: each with its receipt</h2><table id="recent-runs"><tr><th>DAG</th><th>collections</th>'
        "<th>started (UTC)</th><th>kind</th><th>rows</th><th>objects</th><th>bytes</th><th>saves / month</th>"
        "<th>receipt</th></tr>"
    ]
    for r in report.get("recent_runs", []):
        href = f"runs/{quote(r['dag_id'], safe='')}/{quote(r['run_id'], safe='')}"
        out.append(
            f'<tr data-dag="{html.escape(r["dag_id"])}" data-run-id="{html.escape(r["run_id"])}" '
            f'data-dry-run="{str(r["dry_run"]).lower()}" data-bytes="{r["bytes_reclaimed"]}">'
            + _cells(
                r["dag_id"],
                ", ".join(r["collections"]) or "—",
                r["started_at"][:16].replace("T", " "),
                "dry run" if r["dry_run"] else "real",
            )
            + f'<td class="num">{r["rows_deleted"]:,}</td><td class="num">{r["objects_deleted"]:,}</td>'
            f'<td class="num">{html.escape(human_bytes(r["bytes_reclaimed"]))}</td>'
            f'<td class="num">{html.escape(usd_text(r["bytes_reclaimed"] / GIB * price))}</td>'
            f'<td><a class="receipt" href="{html.escape(href)}">receipt</a></td></tr>'
        )
    if not report.get("recent_runs"):
        out.append('<tr><td colspan="9" class="none">no runs yet</td></tr>')
    out.append("</table>")
    return "".join(out)


def _count(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def _data(n: Any) -> str:
    return "" if n is None else html.escape(str(n))


STALLED_AFTER_S = 3600  # a run with nothing done for an hour is flagged: most likely stopped before its report


def _stalled(progress: dict[str, Any]) -> str:
    idle = progress.get("idle_seconds") or 0
    if idle < STALLED_AFTER_S:
        return ""
    return f' <span class="stalled hint">(nothing for {idle / 3600:,.1f} h: stopped? see its Airflow run)</span>'


def in_progress_table(report: dict[str, Any]) -> str:
    """The runs not finished yet, newest first, each with its progress and a link to its receipt (which refreshes
    itself while the run goes on)."""
    runs = report.get("in_progress", [])
    if not runs:
        return (
            '<h2>Runs in progress</h2><p id="in-progress-none" class="hint">None: every run blobgc recorded has '
            "finished.</p>"
        )
    out = [
        '<h2>Runs in progress</h2><table id="in-progress"><tr><th>DAG</th><th>run</th><th>kind</th>'
        "<th>started (UTC)</th><th>doing</th><th>parts done / all</th><th>rows deleted</th><th>objects deleted</th>"
        "<th>objects left</th><th>objects / s</th><th>estimated end (UTC)</th><th>last activity (UTC)</th>"
        "<th>receipt</th></tr>"
    ]
    for r in runs:
        p = r["progress"]
        parts, rows, objects, rate = p["parts"], p["rows"], p["objects"], p["rate"]
        href = f"runs/{quote(r['dag_id'], safe='')}/{quote(r['run_id'], safe='')}"
        per_s = f"{rate['objects_per_second']:,.1f}" if rate else "—"
        out.append(
            f'<tr data-dag="{html.escape(r["dag_id"])}" data-run-id="{html.escape(r["run_id"])}" '
            f'data-phase="{html.escape(p["phase"])}" data-parts="{parts["total"]}" data-parts-done="{_data(parts["done"])}" '
            f'data-objects="{_data(objects["deleted"])}" data-objects-left="{_data(objects["left"])}" '
            f'data-eta="{_data(p["eta"])}">'
            + _cells(r["dag_id"])
            + f'<td class="run-id">{html.escape(r["run_id"])}</td>'
            + _cells("dry run" if r["dry_run"] else "real", r["started_at"][:16].replace("T", " "))
            + f'<td title="{html.escape(p["phase_text"])}">{html.escape(p["phase"])}{_stalled(p)}</td>'
            f'<td class="num">{_count(parts["done"])} / {parts["total"]:,}</td>'
            f'<td class="num">{_count(rows["deleted"])}</td><td class="num">{_count(objects["deleted"])}</td>'
            f'<td class="num">{_count(objects["left"])}</td>'
            f'<td class="num">{per_s}</td>'
            + _cells((p["eta"] or "—")[:19].replace("T", " "), p["last_activity_at"][:19].replace("T", " "))
            + f'<td><a class="receipt" href="{html.escape(href)}">receipt</a></td></tr>'
        )
    out.append(
        "</table><p class='hint'>Runs blobgc recorded that have not finished, newest first: what each is doing, the "
        "parts of its plan done, what it deleted so far and what is left, the objects its drain dealt with per second "
        "over the last minute, and the end that rate gives. Each receipt shows the same and refreshes itself. A run "
        "whose last activity is long past has most likely stopped before its report task (see its Airflow run).</p>"
    )
    return "".join(out)


def stored_still(report: dict[str, Any]) -> str:
    """What deleted bytes are still stored: versioned buckets (flagged when no rule frees them), and quarantine."""
    parts = ["<h2>Deleted, but still stored</h2>"]
    flagged = [b for b in report.get("buckets", []) if b["keeps_every_version"]]
    for b in flagged:
        parts.append(
            f'<p class="warning keeps-every-version" data-bucket="{html.escape(b["bucket"])}">'
            f"<b>{html.escape(b['bucket'])}</b>: {html.escape(b['warning'])} "
            f"({html.escape(human_bytes(b['bytes_noncurrent']))} deleted there in this window). Add a rule, e.g.: "
            f"<code>{html.escape(b['suggested_rule'])}</code></p>"
        )
    for b in report.get("buckets", []):
        if b["versioned"] and b["noncurrent_days"] is not None:
            parts.append(
                f'<p class="noncurrent" data-bucket="{html.escape(b["bucket"])}"><b>{html.escape(b["bucket"])}</b> '
                f"is versioned; its lifecycle rule frees noncurrent versions after {b['noncurrent_days']} days "
                f"({html.escape(human_bytes(b['bytes_noncurrent']))} deleted there in this window).</p>"
            )
    for b in report.get("buckets", []):
        if b.get("delete_markers") and not b["expired_markers"]:
            parts.append(
                f'<p class="delete-markers" data-bucket="{html.escape(b["bucket"])}" '
                f'data-markers="{b["delete_markers"]}"><b>{html.escape(b["bucket"])}</b>: blobgc left '
                f"{b['delete_markers']:,} delete markers there in this window; no lifecycle rule removes them once "
                "their versions expire (add ExpiredObjectDeleteMarker).</p>"
            )
    held = report.get("quarantine", [])
    if held:
        parts.append(
            '<table id="quarantine"><tr><th>DAG</th><th>bucket</th><th>objects in quarantine</th><th>bytes</th>'
            "<th>next purge due</th><th>last</th></tr>"
        )
        for q in held:
            parts.append(
                f'<tr data-dag="{html.escape(q["dag_id"])}" data-objects="{q["objects"]}" data-bytes="{q["bytes"]}">'
                + _cells(q["dag_id"], q["bucket"])
                + f'<td class="num">{q["objects"]:,}</td>'
                + _cells(
                    human_bytes(q["bytes"]),
                    q["next_expiry"][:16].replace("T", " "),
                    q["last_expiry"][:16].replace("T", " "),
                )
                + "</tr>"
            )
        parts.append("</table>")
    if len(parts) == 1:
        parts.append(
            '<p id="stored-none" class="hint">Nothing: no quarantine holds deleted objects, and no '
            "versioned bucket was deleted from.</p>"
        )
    return "".join(parts)


def render_page(report: dict[str, Any], *, json_href: str = "api/reclaim") -> str:
    """The whole page: the runs in progress, the charts (bytes or dollars, and objects) with a legend, the daily table,
    last runs, recent runs with their receipts, owed deletions, reconcile findings."""
    colours = dag_colours(report)
    legend = "".join(f'<span><i style="background:{c}"></i>{html.escape(d)}</span>' for d, c in colours.items())
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>blobgc storage reclaim</title>",
        f"<style>{PAGE_CSS}</style></head>",
        f'<body data-since="{report["since"]}" data-until="{report["until"]}">',
        "<h1>blobgc storage reclaim</h1>",
        f'<p class="hint">Real runs, {report["since"]} to {report["until"]} (UTC). Dry runs are in the table '
        f'and under Last runs, never in the charts. The same data as JSON: <a href="{json_href}">{json_href}</a>.</p>',
        in_progress_table(report),
        f'<div class="legend">{legend}</div>',
        collection_filter(report),
    ]
    price = float(report["usd_per_gb_month"])
    parts.append(  # a toggle of CSS only: the page has no script
        '<div id="reclaim-charts" class="unit-toggle">Show reclaim in: '
        '<input type="radio" name="unit" id="unit-bytes" checked><label for="unit-bytes">bytes</label> '
        '<input type="radio" name="unit" id="unit-usd"><label for="unit-usd">dollars (monthly cost saved)</label>'
        f'<div class="panel-bytes"><h2>{METRICS["bytes_reclaimed"]} per day</h2>'
        f"{render_chart_svg(report, 'bytes_reclaimed', colours)}</div>"
        f'<div class="panel-usd"><h2>{LABELS[USD_METRIC]} per day</h2>'
        f'<p class="hint">Bytes reclaimed × ${price:g} per GB-month (S3 Standard in blobgc.storage_price, from '
        f"Variable blobgc_storage_prices): what the deleted objects would cost each month had they stayed.</p>"
        f"{render_chart_svg(report, USD_METRIC, colours)}</div></div>"
    )
    parts.append(f"<h2>{METRICS['objects_deleted']} per day</h2>")
    parts.append(render_chart_svg(report, "objects_deleted", colours))
    view = (
        f"blobgc.reclaim_daily_by_collection, collection {html.escape(report['collection'])}"
        if report.get("collection")
        else "blobgc.reclaim_daily"
    )
    parts.append(
        f'<h2>Per day, DAG and dry-run flag ({view})</h2><table id="daily"><tr><th>day</th>'
        "<th>DAG</th><th>dry run</th><th>runs</th><th>rows</th><th>objects</th><th>bytes deleted</th>"
        "<th>bytes reclaimed</th></tr>"
    )
    for r in reversed(report["daily"]):
        parts.append(
            f'<tr data-day="{r["day"]}" data-dag="{html.escape(r["dag_id"])}" '
            f'data-dry-run="{str(r["dry_run"]).lower()}" data-objects="{r["objects_deleted"]}" '
            f'data-bytes="{r["bytes_reclaimed"]}" data-bytes-deleted="{r["bytes_deleted"]}" '
            f'data-rows="{r["rows_deleted"]}" data-runs="{r["runs"]}">'
            + _cells(r["day"], r["dag_id"], "dry run" if r["dry_run"] else "real")
            + f'<td class="num">{r["runs"]:,}</td><td class="num">{r["rows_deleted"]:,}</td>'
            f'<td class="num">{r["objects_deleted"]:,}</td>'
            f'<td class="num" title="{r["bytes_deleted"]} bytes">{html.escape(human_bytes(r["bytes_deleted"]))}</td>'
            f'<td class="num" title="{r["bytes_reclaimed"]} bytes">{html.escape(human_bytes(r["bytes_reclaimed"]))}'
            "</td></tr>"
        )
    if not report["daily"]:
        parts.append('<tr><td colspan="8" class="none">no runs in this window</td></tr>')
    parts.append(
        "</table><p class='hint'>Bytes deleted left the buckets' view; bytes reclaimed left storage. The difference "
        "waits in quarantine (reclaimed when purged) or stays as noncurrent versions on a versioned bucket (freed "
        "only by a lifecycle rule).</p>"
    )
    parts.append(stored_still(report))

    parts.append(
        '<h2>Last runs: real next to dry run</h2><table id="last-runs"><tr><th>DAG</th>'
        "<th>last real run</th><th>last dry run</th></tr>"
    )
    for e in report["last_runs"]:
        parts.append(
            f'<tr data-dag="{html.escape(e["dag_id"])}"><td>{html.escape(e["dag_id"])}</td>'
            f"{_run_cell(e['real'])}{_run_cell(e['dry_run'])}</tr>"
        )
    parts.append("</table>")

    parts.append(recent_runs_table(report))

    parts.append("<h2>Owed deletions still outstanding</h2>")
    if report["owed"]:
        parts.append(
            '<table id="owed"><tr><th>DAG</th><th>bucket</th><th>objects</th><th>bytes</th><th>oldest</th>'
            "<th>attempts</th><th>parked</th><th>last errors</th></tr>"
        )
        for o in report["owed"]:
            parts.append(
                f'<tr data-dag="{html.escape(o["dag_id"])}" data-objects="{o["objects"]}">'
                + _cells(o["dag_id"], o["bucket"])
                + f'<td class="num">{o["objects"]:,}</td>'
                + _cells(
                    human_bytes(o["bytes"]),
                    o["oldest"][:16].replace("T", " "),
                    o["max_attempts"],
                    o["parked"],
                    (o["last_errors"] or "")[:200],
                )
                + "</tr>"
            )
        parts.append(
            "</table><p class='hint'>Each DAG's delete_owed_objects task retries these on every run. "
            "Parked deletions kept failing for a reason no retry fixes (the bucket is gone, access is "
            "denied): fix the cause, then unpark them (docs/operations.md).</p>"
        )
    else:
        parts.append('<p id="owed-none">None: every logged deletion is confirmed by S3.</p>')

    rec = report["reconcile"]
    parts.append("<h2>Reconcile: unknown keys and missing objects</h2>")
    if rec["run_id"]:
        parts.append(
            f'<p class="hint">From reconcile run <span class="run-id">{html.escape(rec["run_id"])}</span>. '
            "Reported only: blobgc never deletes an unknown key nor re-creates a missing object.</p>"
            '<table id="reconcile"><tr><th>kind</th><th>bucket</th><th>count</th><th>first keys</th></tr>'
        )
        for f in rec["findings"]:
            keys = "<br>".join(html.escape(k) for k in f["sample_keys"])
            parts.append(
                f'<tr data-kind="{f["kind"]}" data-count="{f["findings"]}">'
                + _cells(f["kind"], f["bucket"])
                + f'<td class="num">{f["findings"]:,}</td><td class="run-id">{keys}</td></tr>'
            )
        parts.append("</table>")
    else:
        parts.append('<p id="reconcile-none">No reconcile findings.</p>')
    parts.append("</body></html>")
    return "".join(parts)
