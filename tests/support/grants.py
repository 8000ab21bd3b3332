"""The README's least-privilege GRANT block, read from README.md and applied with a test's own names.

The block names the role `blobgc`, the database `app`, and the install test's `shop` tables (`shop.upload`,
`shop.post`, `shop.attachment`); a test replaces the role and the database with its own, so that exactly the
documented statements are what it applies.
"""
from __future__ import annotations

import re
import uuid

import psycopg
from psycopg.conninfo import make_conninfo

from tests.helpers import ROOT

SHOP_SCHEMA = """
CREATE SCHEMA shop;
CREATE TABLE shop.upload (id bigint PRIMARY KEY, size_bytes bigint NOT NULL);
CREATE TABLE shop.post (id bigint PRIMARY KEY, cover_id bigint NULL REFERENCES shop.upload);
CREATE TABLE shop.attachment (id bigserial PRIMARY KEY, target_kind text NOT NULL, target_id bigint);
"""
# The collection the block is written for: a foreign key from shop.post, a `references` query on shop.attachment
# (a table with no foreign key), as the README's "Collect your own tables" declares it.
REFERENCES_QUERY = "SELECT target_id FROM shop.attachment WHERE target_kind = 'upload'"


def readme_block() -> list[str]:
    """The statements of README.md's least-privilege block (the ```sql block that creates role blobgc)."""
    text = (ROOT / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```sql\n(.*?)```", text, re.DOTALL) if "CREATE ROLE blobgc" in b]
    code = "\n".join(line.split("--", 1)[0] for line in block.splitlines())
    return [" ".join(statement.split()) + ";" for statement in code.split(";") if statement.strip()]


def with_names(statement: str, role: str, database: str) -> str:
    """A statement of the block with the test's role and database in place of `blobgc` and `app`."""
    statement = re.sub(r"\b(ROLE|TO) blobgc\b", rf"\1 {role}", statement)
    return re.sub(r"\bON DATABASE app\b", f"ON DATABASE {database}", statement)


def revoking(grant: str) -> str:
    """`GRANT x ON y TO r;` as `REVOKE x ON y FROM r;`."""
    found = re.fullmatch(r"GRANT (.+) TO (\S+);", grant)
    assert found, grant
    return f"REVOKE {found[1]} FROM {found[2]};"


def grants(statements: list[str]) -> list[str]:
    return [s for s in statements if s.startswith("GRANT ")]


def new_role_database(admin_dsn: str, *, migrate: bool = True) -> tuple[str, str, str]:
    """A database of its own with the shop tables, PUBLIC's privileges on it revoked (as a hardened database has
    them), and a new role given exactly the README block: (dsn as the role, role, database). With `migrate`,
    blobgc's migrations are applied as the role, as the README says."""
    suffix = uuid.uuid4().hex[:10]
    role, database = f"blobgc_role_{suffix}", f"blobgc_grants_{suffix}"
    with psycopg.connect(make_conninfo(admin_dsn, dbname="postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    with psycopg.connect(make_conninfo(admin_dsn, dbname=database), autocommit=True) as admin:
        admin.execute(f'REVOKE ALL ON DATABASE "{database}" FROM PUBLIC')
        admin.execute(SHOP_SCHEMA)
        for statement in readme_block():
            admin.execute(with_names(statement, role, database))
    dsn = make_conninfo(admin_dsn, dbname=database, user=role)
    if migrate:
        from blobgc.core.migrations import apply_migrations

        with psycopg.connect(dsn, autocommit=True) as conn:
            apply_migrations(conn)
    return dsn, role, database


def drop_role_database(admin_dsn: str, role: str, database: str) -> None:
    with psycopg.connect(make_conninfo(admin_dsn, dbname="postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')
