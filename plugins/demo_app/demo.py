"""`make demo`: load demo data for every seed system, run every DAG once, print the reclaim summary.

Run with the local stack's environment: `source .blobgc/env && python -m blobgc.demo`.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import psycopg

from blobgc.core.clients import pg_connect_from_env, s3_client_from_env
from blobgc.core.collections import bind, ensure_mark_table, load_collections
from blobgc.core.plans import COUNTED_SIZE_SOURCE, plan_figures
from blobgc.core.sizes import human_bytes
from demo_app import statements
from demo_app.blobs import attach_blob, poll_page_usage, upload_blob
from demo_app.studio import add_clip, upload_asset, use_as_cover

# the bucket the DAGs will sweep: Variable blobgc_bucket, as AIRFLOW_VAR_* or its default
BUCKET = os.environ.get("AIRFLOW_VAR_BLOBGC_BUCKET", "blobgc")
ROOT = Path(os.environ.get("BLOBGC_ROOT", Path(__file__).resolve().parents[2]))


def backdate_object(bucket: str, key: str, age: timedelta) -> None:
    """Make an object old the honest way (docs/reference.md §1): the local S3 server moves its LastModified into the
    past.

    A run's cut-offs never pass the present, so the demo ages its objects as it ages its rows.
    """
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode({"bucket": bucket, "key": key, "seconds": int(age.total_seconds())})
    endpoint = os.environ["BLOBGC_S3_ENDPOINT"]
    with urllib.request.urlopen(
        urllib.request.Request(f"{endpoint}/_blobgc/backdate?{query}", method="POST"), timeout=10
    ) as response:
        response.read()


def load_seed_000(conn: psycopg.Connection, s3) -> str:
    """Posts with attached blobs, pages using blobs, and garbage of several ages."""
    tiny_png = bytes.fromhex("89504e470d0a1a0a") + os.urandom(2048)
    with conn.transaction():
        for i in range(1, 6):
            conn.execute(statements.load("demo/insert_post"), {"id": f"demo-post-{i}", "title": f"Demo post {i}"})

    def blob(name: str) -> str:
        return upload_blob(
            conn,
            s3,
            BUCKET,
            tiny_png + name.encode(),
            filename=f"{name}.png",
            mimetype="image/png",
            thumbnail=tiny_png[:512],
        )

    for i in range(10):
        attach_blob(conn, f"demo-post-{i % 5 + 1}", blob(f"attached-{i}"))
    for i in range(5):
        poll_page_usage(conn, blob(f"on-page-{i}"), f"/demo/page/{i}")
    for i in range(3):
        stale = blob(f"stale-page-{i}")
        poll_page_usage(conn, stale, f"/demo/old-page/{i}")
        with conn.transaction():
            conn.execute(statements.load("demo/backdate_page_usage"), {"blob_id": stale, "age": "40 days"})
    old_garbage = [blob(f"unused-for-3-days-{i}") for i in range(6)]
    with conn.transaction():
        conn.execute(statements.load("demo/backdate_blobs_unused"), {"ids": old_garbage, "age": "3 days"})
    for i in range(6):
        blob(f"fresh-unreferenced-{i}")
    return (
        "seed 000: 5 posts, 10 attached blobs, 5 on live pages, 3 on pages unconfirmed for 40 days, "
        "6 unused for 3 days, 6 fresh unreferenced"
    )


def load_seed_002(conn: psycopg.Connection, s3) -> str:
    """Pastes through the application's write path: shared content, expired and live, cached in Redis."""
    from blobgc.core.clients import redis_from_env
    from demo_app.pastes import create_paste

    redis = redis_from_env()
    prefix = os.environ.get("AIRFLOW_VAR_BLOBGC_PASTE_REDIS_PREFIX", "")
    now = datetime.now(UTC)

    def paste(text: str, hours: float) -> None:
        create_paste(
            conn,
            s3,
            redis,
            bucket=BUCKET,
            content=text.encode() * 40,
            redis_prefix=prefix,
            expires_at=now + timedelta(hours=hours),
        )

    for i in range(4):  # seed 002's example: A expires today, B (same content) next month
        paste(f"shared snippet {i}\n", -2)
        paste(f"shared snippet {i}\n", 24 * 30)
    for i in range(6):
        paste(f"expired snippet {i}\n", -1 - i)
    for _ in range(3):
        paste("duplicate, all expired\n", -3)
    for i in range(5):
        paste(f"live snippet {i}\n", 24 * 7)
    return (
        "seed 002: 4 contents shared by an expired and a live paste, 6 expired pastes, "
        "3 expired pastes of one content, 5 live pastes (all cached in Redis)"
    )


class DemoPartnerSite:
    """A partner site on loopback for the crawler's demo run: /photo/<n>.jpg is a generated photo, anything else 404."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                name = self.path.rsplit("/", 1)[-1]
                if not (self.path.startswith("/photo/") and name.endswith(".jpg") and name[:-4].isdigit()):
                    self.send_error(404)
                    return
                body = demo_photo(int(name[:-4]))
                self.send_response(200)
                self.send_header("Content-Type", "image/jpeg")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"


def demo_photo(n: int) -> bytes:
    from PIL import Image

    image = Image.new("RGB", (1600, 1200), ((n * 67) % 256, (n * 29) % 256, 160))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=85)
    return out.getvalue()


PARTNER_SITE: DemoPartnerSite | None = None


def load_seed_001(conn: psycopg.Connection, s3) -> str:
    """Offers with photos (pre-uploaded and attached), rotten unbound photos, and a partner site to crawl."""
    global PARTNER_SITE
    from demo_app.images import ImageSettings, attach_images, pre_upload

    settings = ImageSettings(bucket=BUCKET)
    with conn.transaction():
        for offer_id in (1, 2, 3):
            conn.execute(statements.load("demo/insert_offer"), {"id": offer_id, "title": f"Demo car {offer_id}"})
    photos = [pre_upload(conn, s3, settings, demo_photo(n)) for n in range(1, 6)]
    attach_images(conn, 1, photos[:2])
    attach_images(conn, 2, photos[2:4])
    with conn.transaction():  # offer 2 is sold: its photos are unbound by ON DELETE SET NULL
        conn.execute(statements.load("demo/delete_offer"), {"id": 2})
        conn.execute(statements.load("demo/backdate_unbound_images"), {"age": "20 days"})
    PARTNER_SITE = DemoPartnerSite()
    return (
        "seed 001: offer 1 with 2 photos, offer 2 sold 20 days ago (2 photos unbound), 1 photo pre-uploaded "
        "and never attached (20 days), a partner site for the crawler"
    )


def crawler_conf() -> dict:
    assert PARTNER_SITE is not None, "load_seed_001 starts the partner site"
    return {
        "requests": [
            {
                "offer_id": 3,
                "urls": [
                    PARTNER_SITE.url("/photo/11.jpg"),
                    PARTNER_SITE.url("/photo/12.jpg"),
                    PARTNER_SITE.url("/gone.jpg"),
                ],
            },
            {"offer_id": 1, "urls": [PARTNER_SITE.url("/photo/11.jpg")]},
        ]
    }


def load_reconcile_cases(conn: psycopg.Connection, s3) -> str:
    """What only reconciliation finds: an object no row accounts for, a key of no known layout, a row without its
    object."""
    import hashlib

    orphan = hashlib.sha256(b"demo: an upload whose row was never written").hexdigest()
    s3.put_object(Bucket=BUCKET, Key=f"pastes/{orphan}", Body=b"orphaned paste body")
    s3.put_object(Bucket=BUCKET, Key="tmp/forgotten-export.csv", Body=b"id,name\n1,demo\n")
    for key in (f"pastes/{orphan}", "tmp/forgotten-export.csv"):  # both left behind two days ago
        backdate_object(BUCKET, key, timedelta(days=2))
    with conn.transaction():
        conn.execute(statements.load("demo/insert_blob_without_object"), {"id": "demomissing"})
    attach_blob(conn, "demo-post-1", "demomissing")
    return (
        "seed 001 §5: an orphan object (pastes/) and a key of unknown layout (tmp/), both 2 days old, and an "
        "attached blob whose object is missing"
    )


def load_seed_003(conn: psycopg.Connection, s3) -> str:
    """Seed 003's walk-through: three generations of mails m1-m9 over blobs b1-b6, then five deletions."""
    import uuid

    from blobgc.core.runs import RunRef
    from blobgc.kinds.generations.collector import open_generation
    from demo_app.mail import delete_reference, store_blob

    demo = uuid.uuid4().hex[:8]  # demo runs can be repeated: each one adds three generations of its own
    stored: dict[str, str] = {}
    mails = [
        [("m1", "b1"), ("m2", "b2"), ("m3", "b2")],
        [("m4", "b3"), ("m5", "b4"), ("m6", "b4")],
        [("m7", "b5"), ("m8", "b6"), ("m9", "b6")],
    ]
    opened = []
    for n, generation in enumerate(mails, start=1):  # each generation opened, then its mails stored
        opened.append(open_generation(conn, RunRef("blobgc_demo", f"demo-{demo}-rg{n}")).generation)
        for message, blob in generation:
            body = f"Demo mail body {blob} ({demo})\n".encode() * 64
            stored[message] = store_blob(
                conn, s3, bucket=BUCKET, owner_id=f"demo-{demo}-{message}", content=body
            ).blob_id
    for message in ("m1", "m2", "m7", "m8", "m3"):
        delete_reference(conn, owner_id=f"demo-{demo}-{message}", blob_id=stored[message])
    first = opened[0]
    return (
        f"seed 003: generations {first}-{first + 2} holding the seed's mails m1-m9 over blobs b1-b6; m1, m2, "
        f"m3, m7, m8 deleted (the run opens generation {first + 3} and collects generation {first}: b1 and "
        f"b2; b5 waits until generation {first + 2} is n-2)"
    )


def load_seed_004(conn: psycopg.Connection, s3) -> str:
    """Seed 004's store, used as the application does: presigned POSTs, finalize, a profile avatar."""
    import requests

    from blobgc.core.clients import redis_from_env
    from blobgc.core.settings import MediaSettings
    from blobgc.kinds.media.layouts import thumb_key
    from demo_app.media import finalize, finalize_profile, presign_profile_upload, presign_upload

    redis = redis_from_env()
    settings = MediaSettings(bucket_prefix=os.environ.get("AIRFLOW_VAR_BLOBGC_MEDIA_BUCKET_PREFIX", "fakebook-"))
    user = "0001000000000002"

    def post(signed: dict, body: bytes) -> str:
        response = requests.post(signed["url"], data=signed["fields"], files={"file": ("upload", body)}, timeout=30)
        response.raise_for_status()
        return signed["key"]

    masters = [
        finalize(s3, redis, settings, user, post(presign_upload(s3, settings, user, f"photo{n}.jpg", len(body)), body))
        for n, body in enumerate(demo_photo(n) for n in range(3))
    ]
    avatar = demo_photo(7)
    finalize_profile(
        s3,
        redis,
        settings,
        user,
        "avatar",
        post(presign_profile_upload(s3, settings, user, "avatar", "me.jpg", len(avatar)), avatar),
    )
    post(presign_upload(s3, settings, user, "abandoned.jpg", len(avatar)), avatar)  # never finalized
    orphan_of = masters[0].replace(masters[0].rsplit("/", 1)[1][8:16], "deadbeef")  # a master that is gone
    s3.put_object(Bucket=settings.images_bucket, Key=thumb_key(orphan_of, 240, 240), Body=b"RIFF")
    backdate_object(settings.images_bucket, thumb_key(orphan_of, 240, 240), timedelta(days=2))
    return (
        f"seed 004: user {user} uploaded 3 photos and an avatar through presigned POSTs (4 thumbnail jobs "
        "queued), abandoned 1 upload in staging (kept by the demo run: younger than max_age_minutes), and "
        "has 1 thumbnail whose master is gone (written 2 days ago)"
    )


def load_studio(conn: psycopg.Connection, s3) -> str:
    """The second application (collection studio_assets): covers, clips, a shared content object, and garbage."""

    def asset(name: str, content: bytes | None = None) -> str:
        return upload_asset(
            conn, s3, BUCKET, content or f"studio {name}".encode() * 64, kind="png", preview=b"preview " + name.encode()
        )

    for project in (1, 2):
        use_as_cover(conn, project, asset(f"cover-{project}"))
        add_clip(conn, project, asset(f"clip-{project}"))
    use_as_cover(conn, 3, None)  # a project without a cover: a NULL reference references nothing
    shared = b"the same bytes, uploaded twice" * 64
    add_clip(conn, 2, asset("shared-in-use", shared))
    garbage = [asset("shared-unused", shared), asset("unused-1"), asset("unused-2")]
    fresh = asset("unused-but-new")
    with conn.transaction():
        conn.execute(statements.load("demo/backdate_studio_assets"), {"ids": garbage, "age": "3 days"})
    # as if an earlier mark had found the garbage unused two days ago (blobgc keeps this state, not the app)
    found = load_collections(default_bucket=BUCKET)["studio_assets"]
    bound = bind(conn, found, default_bucket=BUCKET)
    ensure_mark_table(conn, bound)
    with conn.transaction():
        conn.execute(statements.load("demo/insert_studio_marks"), {"ids": garbage + [fresh], "age": "2 days"})
    return (
        "studio (collection studio_assets, uuid ids): 2 covers, 3 clips (one shares its bytes with an unused "
        "asset), 3 assets unused for 2 days, 1 unused but uploaded just now"
    )


DEMO_LOADERS: list[Callable[[psycopg.Connection, object], str]] = [
    load_seed_000,
    load_seed_001,
    load_seed_002,
    load_seed_003,
    load_seed_004,
    load_reconcile_cases,
    load_studio,
]


# Every DAG, in the order the demo runs them, with the conf of each run (or what makes it).
def restore_conf() -> dict:
    """A dry-run blobgc_restore of the demo's real sweep: what undoing it would bring back."""
    with pg_connect_from_env() as conn:
        row = conn.execute(
            "SELECT run_id FROM blobgc.run WHERE dag_id = 'blobgc_sweep' AND NOT dry_run "
            "ORDER BY started_at DESC LIMIT 1"
        ).fetchone()
    return {"run_id": row[0] if row else "none", "source_dag_id": "blobgc_sweep", "dry_run": True}


def last_dry_run(dag_id: str) -> str | None:
    with pg_connect_from_env() as conn:
        row = conn.execute(
            "SELECT run_id FROM blobgc.run WHERE dag_id = %s AND dry_run ORDER BY started_at DESC LIMIT 1", (dag_id,)
        ).fetchone()
    return row[0] if row else None


def from_plan(dag_id: str) -> Callable[[], dict]:
    """The real run executes exactly the plan its dry run made, re-checking each item (README "Review, approve,
    undo")."""

    def conf() -> dict:
        plan = last_dry_run(dag_id)
        return {"from_plan": plan} if plan else {}

    return conf


DEMO_RUNS: list[tuple[str, dict | Callable[[], dict]]] = [
    ("blobgc_mark", {}),
    ("blobgc_sweep", {"dry_run": True}),
    ("blobgc_sweep", from_plan("blobgc_sweep")),
    ("blobgc_restore", restore_conf),
    ("blobgc_paste_expiry", {"dry_run": True}),
    ("blobgc_paste_expiry", from_plan("blobgc_paste_expiry")),
    ("blobgc_crawler", crawler_conf),
    ("blobgc_image_cleanup", {"dry_run": True}),
    ("blobgc_image_cleanup", from_plan("blobgc_image_cleanup")),
    ("blobgc_generations", {"dry_run": True}),
    ("blobgc_generations", from_plan("blobgc_generations")),
    ("blobgc_media_thumbnails", {"dry_run": True}),
    ("blobgc_media_thumbnails", {}),
    ("blobgc_media_staging", {"dry_run": True}),
    ("blobgc_media_staging", from_plan("blobgc_media_staging")),
    # an orphan is deleted only once `confirmations` (2) real runs in a row found it orphaned: the first real run sees
    # it and waits, a dry run reports it waiting, and the second real run deletes it
    ("blobgc_reconcile", {}),
    ("blobgc_reconcile", {"dry_run": True}),
    ("blobgc_reconcile", {}),
]


def run_dag(dag_id: str, conf: dict) -> bool:
    logfile = ROOT / ".blobgc" / "logs" / f"demo-{dag_id}.log"
    started = time.monotonic()
    with open(logfile, "ab") as out:
        # -f: parse only this DAG's file (about 6 s to start instead of 20 s for the whole folder)
        proc = subprocess.run(
            ["airflow", "dags", "test", dag_id, "-c", json.dumps(conf), "-f", str(ROOT / "dags" / f"{dag_id}.py")],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    ok = proc.returncode == 0
    shown = json.dumps(conf) if len(json.dumps(conf)) <= 20 else json.dumps(conf)[:16] + "...}"
    print(
        f"  {dag_id:<28} conf={shown:<20} {'ok' if ok else 'FAILED'} "
        f"in {time.monotonic() - started:.1f}s (log: {logfile.relative_to(ROOT)})",
        flush=True,
    )
    return ok


def print_summary(conn: psycopg.Connection, since: datetime) -> None:
    """This demo's runs as a table, one line per run, with the real runs' total and what is still owed."""
    rows = conn.execute(statements.load("demo/select_runs_since"), {"since": since}).fetchall()
    header = f"| {'DAG':<26} | {'mode':<7} | {'rows':>7} | {'objects':>8} | {'bytes':>10} | {'reclaimed':>10} |"
    rule = "|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|"
    print("\nReclaim summary (this demo's runs, from blobgc.run; per day in blobgc.reclaim_daily)")
    print(header)
    print(rule)
    total = [0, 0, 0, 0]
    for dag_id, _run_id, dry_run, n_rows, n_objects, n_bytes, n_reclaimed in rows:
        print(
            f"| {dag_id:<26} | {'dry-run' if dry_run else 'real':<7} | {n_rows:>7,} | {n_objects:>8,} | "
            f"{human_bytes(n_bytes):>10} | {'—' if dry_run else human_bytes(n_reclaimed):>10} |"
        )
        if not dry_run:
            total = [total[0] + n_rows, total[1] + n_objects, total[2] + n_bytes, total[3] + n_reclaimed]
    print(rule)
    print(
        f"| {'all real runs':<26} | {'real':<7} | {total[0]:>7,} | {total[1]:>8,} | {human_bytes(total[2]):>10} | "
        f"{human_bytes(total[3]):>10} |"
    )
    print(
        "A dry run's objects are every key of its plan, present or not, and its bytes the plan's sizes (unknown "
        "sizes not counted); a real run's are the objects its drain deleted, at " + COUNTED_SIZE_SOURCE + ". "
        "Bytes are deleted bytes; reclaimed counts only those gone from storage: the demo's buckets are versioned, "
        "so what it deletes stays stored as noncurrent versions until their lifecycle rule frees them (7 days; "
        "each receipt says when)."
    )
    print_plan_figures(conn, [(dag_id, run_id) for dag_id, run_id, *_ in rows])
    print("\nPer collection (real runs; blobgc.reclaim_daily_by_collection)")
    header = f"| {'collection':<26} | {'rows':>7} | {'objects':>8} | {'bytes':>10} | {'reclaimed':>10} |"
    print(header)
    print("|" + "|".join("-" * len(c) for c in header.split("|")[1:-1]) + "|")
    for collection, n_rows, n_objects, n_bytes, n_reclaimed in conn.execute(
        statements.load("demo/select_collections_since"), {"since": since}
    ):
        print(
            f"| {collection:<26} | {n_rows:>7,} | {n_objects:>8,} | {human_bytes(n_bytes):>10} | "
            f"{human_bytes(n_reclaimed):>10} |"
        )
    owed = conn.execute(
        "SELECT count(*), coalesce(sum(cardinality(coalesce(o.keys, l.keys))), 0) "
        "FROM blobgc.outbox o JOIN blobgc.deletion_log l ON l.id = o.log_id"
    ).fetchone()
    print(f"Owed deletions still outstanding: {owed[1]} objects in {owed[0]} log rows")


def print_plan_figures(conn: psycopg.Connection, runs: list[tuple[str, str]]) -> None:
    """Each plan, and what its execution did with every key: planned = deleted + absent + kept + failed, in keys and
    in the plan's bytes, each figure with its source (`blobgc.core.plans.PlanFigures`)."""
    print("\nPlans and what became of them (a real run with from_plan executes the dry run's plan above it)")
    for dag_id, run_id in runs:
        figures = plan_figures(conn, dag_id, run_id)
        if figures is None:
            continue
        mode = (
            "dry run"
            if figures.dry_run
            else "real run (its own plan)"
            if figures.plan_run_id == run_id
            else f"real run (the plan of dry run {figures.plan_run_id})"
        )
        print(f"  {dag_id} {mode}:")
        for line in figures.lines():
            print(f"    {line}")


def main() -> int:
    since = datetime.now(UTC)
    s3 = s3_client_from_env()
    with pg_connect_from_env() as conn:
        print("Loading demo data")
        for loader in DEMO_LOADERS:
            print(f"  {loader(conn, s3)}")
        print("Running every DAG once (airflow dags test)")
        ok = all([run_dag(dag_id, conf() if callable(conf) else conf) for dag_id, conf in DEMO_RUNS])
        print_summary(conn, since)
    port = os.environ.get("AIRFLOW__API__PORT", "8080")
    print(f"\nAirflow UI: http://localhost:{port}  (user admin, password admin)")
    print(
        f"Storage reclaim page: http://localhost:{port}/blobgc/reclaim  (in the UI: Browse > Storage reclaim; "
        f"JSON for BI tools at /blobgc/api/reclaim)"
    )
    with pg_connect_from_env() as conn:
        row = conn.execute(
            "SELECT run_id FROM blobgc.run WHERE dag_id = 'blobgc_sweep' AND NOT dry_run "
            "AND started_at >= %s ORDER BY started_at DESC LIMIT 1",
            (since,),
        ).fetchone()
    if row:
        print(
            f"The real sweep's receipt (its plan, what it deleted, the manifest, Undo): "
            f"http://localhost:{port}/blobgc/runs/blobgc_sweep/{quote(row[0], safe='')}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
