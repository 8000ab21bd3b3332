"""blobgc.dag_kit.connections: the Airflow connections reach libpq and botocore as they are configured."""
from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from blobgc.core.settings import ConfigurationError
from blobgc.dag_kit.connections import client_config, conninfo_of


def test_every_libpq_extra_of_the_postgres_connection_reaches_libpq(test_dsn):
    """sslmode, client certificates, options...: what the connection's extra says, libpq gets (issue 18)."""
    parts = conninfo_to_dict(test_dsn)
    fields = {"host": parts["host"], "port": int(parts["port"]), "login": parts.get("user"), "password": None,
              "schema": parts["dbname"]}
    extra = {"sslmode": "require", "sslcert": "/etc/blobgc/client.crt", "sslkey": "/etc/blobgc/client.key",
             "sslrootcert": "/etc/blobgc/ca.crt", "options": "-c statement_timeout=5000", "keepalives": "1",
             "cursor": "dictcursor", "host": "elsewhere"}
    assert conninfo_to_dict(conninfo_of(**fields, extra=extra)) == {
        "host": parts["host"], "port": parts["port"], "user": parts.get("user"), "dbname": parts["dbname"],
        "sslmode": "require", "sslcert": "/etc/blobgc/client.crt", "sslkey": "/etc/blobgc/client.key",
        "sslrootcert": "/etc/blobgc/ca.crt", "options": "-c statement_timeout=5000", "keepalives": "1",
        "application_name": "blobgc"}
    # libpq itself acts on them: the local server has no TLS, so sslmode=require is refused by libpq
    with pytest.raises(psycopg.OperationalError, match="SSL"):
        psycopg.connect(conninfo_of(**fields, extra={"sslmode": "require"}), connect_timeout=5)
    with psycopg.connect(conninfo_of(**fields, extra={"options": "-c statement_timeout=4321",
                                                      "application_name": "on-call"})) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "4321ms"
        assert conn.execute("SELECT current_setting('application_name')").fetchone()[0] == "on-call"
    with pytest.raises(ConfigurationError, match="IAM"):
        conninfo_of(**fields, extra={"iam": True})


def test_the_connections_config_kwargs_win_over_blobgcs_defaults_and_bad_ones_are_refused():
    config = client_config({"config_kwargs": {"retries": {"max_attempts": 7, "mode": "adaptive"},
                                              "connect_timeout": 2}})
    assert (config.retries, config.connect_timeout) == ({"max_attempts": 7, "mode": "adaptive"}, 2)
    assert config.request_checksum_calculation == "when_required"  # blobgc's default where the connection is silent
    assert client_config({}).retries == {"mode": "standard", "total_max_attempts": 5}  # blobgc's: 4 retries
    with pytest.raises(ConfigurationError, match="not botocore Config options"):
        client_config({"config_kwargs": {"no_such_option": 1}})
    with pytest.raises(ConfigurationError, match="must be a JSON object"):
        client_config({"config_kwargs": "retries=3"})
