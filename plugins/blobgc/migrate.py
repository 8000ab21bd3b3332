"""`python -m blobgc.migrate`: create or update blobgc's schema, through an Airflow connection or a DSN.

    python -m blobgc.migrate --conn-id blobgc_postgres     # the connection the DAGs use (every extra kept)
    python -m blobgc.migrate --dsn postgresql://…          # or BLOBGC_PG_DSN
    python -m blobgc.migrate --status [--conn-id …]       # list applied and pending migrations, change nothing

The runner itself is `blobgc.core.migrations` (no Airflow there); this entry point only finds the database,
so a team migrates through the same connection, TLS extras included, that its DAGs use.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import psycopg

from blobgc.core import migrations as migrate
from blobgc.core.settings import ConfigurationError

NOT_ALLOWED = (
    "this role may not do that. python -m blobgc.migrate needs CREATE on the database while schema blobgc "
    "does not exist, else USAGE and CREATE on it, and runs as the role that owns blobgc's tables (the one "
    "that migrated first): see the README's least-privilege GRANT block"
)


def conninfo(args: argparse.Namespace) -> str:
    if args.conn_id:
        from blobgc.dag_kit.connections import pg_conninfo

        # This command runs where the `airflow` CLI runs, beside the metadata database, as Airflow's own server
        # processes do: a connection stored there (`airflow connections add`) resolves as well as one in the
        # environment or a secrets backend. Outside a task, the Task SDK otherwise looks only at those two.
        os.environ.setdefault("_AIRFLOW_PROCESS_CONTEXT", "server")

        return pg_conninfo(args.conn_id)
    dsn = args.dsn or os.environ.get("BLOBGC_PG_DSN")
    if not dsn:
        raise SystemExit("name the database: --conn-id <Airflow connection>, --dsn <libpq URI>, or BLOBGC_PG_DSN")
    return dsn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m blobgc.migrate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--conn-id", help="an Airflow connection of type postgres (e.g. blobgc_postgres)")
    source.add_argument("--dsn", help="a libpq connection string (default: BLOBGC_PG_DSN)")
    parser.add_argument("--status", action="store_true", help="list applied and pending migrations only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[migrate] %(message)s")
    try:
        with psycopg.connect(conninfo(args), autocommit=True) as conn:
            if args.status:
                print(migrate.status(conn))
                return 0
            applied = migrate.apply_migrations(conn)
    except ConfigurationError as error:  # a missing grant, checked before anything ran: named with its GRANT
        print(f"[migrate] {error}", file=sys.stderr)
        return 2
    except psycopg.errors.InsufficientPrivilege as error:  # one no check foresaw (a table another role owns)
        print(f"[migrate] {str(error).strip()}: {NOT_ALLOWED}", file=sys.stderr)
        return 2
    print(f"[migrate] {migrate.summary(migrate.TABLE, applied, [version for version, _ in migrate.migrations()])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
