"""blobgc.core.clients: the plain clients every layer opens connections with."""
from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from blobgc.core.clients import pg_connect


def test_a_connect_timeout_in_the_conninfo_wins_over_the_default(test_dsn):
    with pg_connect(make_conninfo(test_dsn, connect_timeout=3)) as conn:
        assert conninfo_to_dict(conn.info.dsn)["connect_timeout"] == "3"


def test_without_one_the_connect_timeout_is_ten_seconds(test_dsn):
    with pg_connect(test_dsn) as conn:
        assert conninfo_to_dict(conn.info.dsn)["connect_timeout"] == "10"
        assert conn.autocommit
