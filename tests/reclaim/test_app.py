"""blobgc.reclaim.app and .page: the reclaim endpoints behind Airflow's auth, and the page in a real browser."""
from __future__ import annotations

import json
import os
import tempfile
import urllib.error
import urllib.request
import uuid
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest

from blobgc.core.sizes import human_bytes
from tests.helpers import AIRFLOW_API, airflow_token


ROOT = Path(__file__).resolve().parents[2]


# screenshots go outside the checkout unless BLOBGC_TEST_ARTIFACTS names a folder: no test writes into the repository
ARTIFACTS = Path(os.environ.get("BLOBGC_TEST_ARTIFACTS") or Path(tempfile.gettempdir()) / "blobgc-test-artifacts")


BASE = AIRFLOW_API


PAGE_DAG = "blobgc_page_test_"


def get(path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    request = urllib.request.Request(BASE + path, headers=headers or {})
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def view_rows(conn, since: date) -> list[dict]:
    cur = conn.execute("SELECT day, dag_id, dry_run, runs, rows_deleted, objects_deleted, bytes_reclaimed, "
                       "bytes_deleted, bytes_noncurrent, noncurrent_freed_by "
                       "FROM blobgc.reclaim_daily WHERE day >= %s ORDER BY day, dag_id, dry_run", (since,))
    names = [c.name for c in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


@pytest.fixture
def app_runs(stack):
    """Runs of this test's own DAG ids in the stack's application database (the one the api-server reads)."""
    suffix = uuid.uuid4().hex[:6]
    now = datetime.now(timezone.utc)
    rows = [  # dag, dry_run, days ago, rows, objects, bytes
        (f"{PAGE_DAG}a_{suffix}", False, 0, 12, 24, 7_340_032),
        (f"{PAGE_DAG}a_{suffix}", True, 0, 30, 60, 9_000_000),
        (f"{PAGE_DAG}a_{suffix}", False, 2, 5, 10, 1_048_576),
        (f"{PAGE_DAG}b_{suffix}", False, 0, 3, 3, 2_621_440),
        (f"{PAGE_DAG}b_{suffix}", False, 1, 0, 0, 0),
    ]
    with psycopg.connect(stack["BLOBGC_PG_DSN"], autocommit=True) as conn:
        for i, (dag, dry, ago, n_rows, n_objects, n_bytes) in enumerate(rows):
            started = now - timedelta(days=ago, minutes=1)
            conn.execute(
                "INSERT INTO blobgc.run (dag_id, run_id, dry_run, started_at, finished_at, rows_deleted, "
                "objects_deleted, bytes_reclaimed) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (dag, f"manual__page_test_{i}", dry, started, started + timedelta(seconds=30), n_rows, n_objects,
                 n_bytes))
        try:
            yield conn
        finally:
            conn.execute("DELETE FROM blobgc.run WHERE dag_id LIKE %s", (f"{PAGE_DAG}%{suffix}",))


def test_reclaim_endpoints_refuse_requests_without_an_airflow_user(stack):
    status, _, body = get("/blobgc/api/reclaim")
    assert status == 401 and b"Not authenticated" in body
    status, _, _ = get("/blobgc/api/reclaim", {"Authorization": "Bearer not-a-jwt"})
    assert status == 403
    status, headers, _ = get("/blobgc/reclaim", {"Accept": "text/html"})
    assert status == 303 and "/auth/login?next=" in headers["location"]
    token = airflow_token()
    status, _, body = get("/blobgc/api/reclaim?days=0", {"Authorization": f"Bearer {token}"})
    assert status == 422 and b"days" in body


def test_json_endpoint_serves_reclaim_daily(stack, app_runs):
    token = airflow_token()
    status, _, body = get("/blobgc/api/reclaim?days=3", {"Authorization": f"Bearer {token}"})
    assert status == 200
    report = json.loads(body)
    expected = view_rows(app_runs, date.fromisoformat(report["since"]))
    freed = "noncurrent_freed_by"
    assert report["daily"] == [{**r, "day": r["day"].isoformat(), freed: r[freed] and r[freed].isoformat()}
                               for r in expected]
    mine = {e["dag_id"]: e for e in report["last_runs"] if e["dag_id"].startswith(PAGE_DAG)}
    a = next(e for d, e in mine.items() if d.startswith(f"{PAGE_DAG}a_"))
    assert [r["bytes_reclaimed"] for r in a["real"]] == [7_340_032, 1_048_576]
    assert [r["bytes_reclaimed"] for r in a["dry_run"]] == [9_000_000]


def test_reclaim_page_in_chromium_matches_reclaim_daily(stack, app_runs, chromium):
    page = chromium.new_page()
    page.goto(f"{BASE}/blobgc/reclaim?days=7")
    assert "/auth/login" in page.url, "an anonymous browser must be sent to Airflow's login page"
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/blobgc/reclaim?days=7")
    page.wait_for_selector("svg.chart")

    since = date.fromisoformat(page.locator("body").get_attribute("data-since"))
    expected = view_rows(app_runs, since)
    assert any(r["dag_id"].startswith(PAGE_DAG) for r in expected)

    for metric in ("bytes_reclaimed", "objects_deleted"):
        bars = page.locator(f'svg.chart[data-metric="{metric}"] rect.bar').evaluate_all(
            "els => els.map(e => ({day: e.dataset.day, dag: e.dataset.dag, value: Number(e.dataset.value), "
            "height: Number(e.getAttribute('height'))}))")
        want = {(r["day"].isoformat(), r["dag_id"]): r[metric] for r in expected if not r["dry_run"] and r[metric]}
        assert {(b["day"], b["dag"]): b["value"] for b in bars} == want, metric
        # The bars are drawn to scale: the day with the most reclaimed fills the plot, the others in proportion.
        totals: dict[str, float] = {}
        for b in bars:
            totals[b["day"]] = totals.get(b["day"], 0) + b["height"]
        peak_value = max(sum(v for (d, _), v in want.items() if d == day) for day in totals)
        peak_height = max(totals.values())
        for b in bars:
            assert b["height"] == pytest.approx(peak_height * b["value"] / peak_value, abs=0.02)

    table = page.locator("table#daily tr[data-day]").evaluate_all(
        "rows => rows.map(r => ({day: r.dataset.day, dag: r.dataset.dag, dry: r.dataset.dryRun === 'true', "
        "runs: Number(r.dataset.runs), rows: Number(r.dataset.rows), objects: Number(r.dataset.objects), "
        "bytes: Number(r.dataset.bytes), text: r.innerText}))")
    assert sorted((t["day"], t["dag"], t["dry"], t["runs"], t["rows"], t["objects"], t["bytes"]) for t in table) == \
        sorted((r["day"].isoformat(), r["dag_id"], r["dry_run"], r["runs"], r["rows_deleted"], r["objects_deleted"],
                r["bytes_reclaimed"]) for r in expected)
    for t in table:  # what a reader sees is the same figure
        assert f"{t['objects']:,}" in t["text"] and human_bytes(t["bytes"]) in t["text"]

    ours = page.locator("table#last-runs tr[data-dag^='blobgc_page_test_a_']")
    assert "7.0 MiB" in ours.locator("td").nth(1).inner_text()  # the last real run
    assert "60 objects" in ours.locator("td").nth(2).inner_text()  # next to the last dry run

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "reclaim_page.png"), full_page=True)

    # The same page from the Airflow UI's nav: the external view embeds it.
    page.goto(f"{BASE}/plugin/blobgc_reclaim")
    frame = page.frame_locator("iframe")
    frame.locator("svg.chart").first.wait_for(timeout=30_000)
    assert frame.locator("h1").inner_text() == "blobgc storage reclaim"
    page.screenshot(path=str(ARTIFACTS / "reclaim_page_in_airflow_ui.png"))
    page.close()


def test_the_receipt_path_handed_to_the_gate_is_a_route_of_the_app():
    """The gate links a plan's receipt with `receipt_path` (blobgc.reclaim.routes), the same route the app serves."""
    from blobgc.reclaim.app import create_app
    from blobgc.reclaim.routes import URL_PREFIX, receipt_path

    path = receipt_path("blobgc_sweep", "manual__2026-11-26T03:00:00+00:00")
    assert path == "/blobgc/runs/blobgc_sweep/manual__2026-11-26T03%3A00%3A00%2B00%3A00"
    within = path.removeprefix(URL_PREFIX)
    served = [route.endpoint.__name__ for route in create_app().routes
              if getattr(route, "path_regex", None) is not None and route.path_regex.match(within)]
    assert served == ["receipt_page"]
