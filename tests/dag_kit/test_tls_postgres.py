"""Issue 18's "done when": a postgres connection with `sslmode` and a client certificate in its extra reaches a
TLS-only PostgreSQL server through blobgc's own connection functions, so the extras reach libpq."""
from __future__ import annotations

import psycopg
import pytest

from blobgc import migrate
from blobgc.core.migrations import migrations
from blobgc.dag_kit.connections import pg_connection, pg_connector
from tests.support.tls_postgres import TlsPostgres, certificate, new_key, tls_postgres, write_pem  # noqa: F401

CONN_ID = "blobgc_tls_postgres"
SESSION = ("SELECT ssl, client_dn, current_user, current_setting('application_name') FROM pg_stat_ssl "
           "WHERE pid = pg_backend_pid()")


@pytest.fixture
def tls_connection(tls_postgres: TlsPostgres, monkeypatch: pytest.MonkeyPatch) -> str:
    """Airflow connection `blobgc_tls_postgres`: sslmode=verify-full, sslrootcert, sslcert and sslkey in its extra."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", tls_postgres.airflow_connection())
    return CONN_ID


def test_a_connection_with_a_client_certificate_in_its_extra_reaches_the_tls_server_authenticated_by_it(
        tls_postgres, tls_connection):
    """On the server's side the session is TLS, its client certificate is ours, and the only way in is `cert`."""
    with pg_connection(tls_connection) as conn:
        assert conn.execute(SESSION).fetchone() == (True, "/CN=postgres", "postgres", "blobgc")
        assert conn.execute("SELECT type, auth_method FROM pg_hba_file_rules").fetchall() == [("hostssl", "cert")]
        assert conn.autocommit  # blobgc's own psycopg 3 connection (blobgc.core.clients.pg_connect)
    connect = pg_connector(tls_connection)
    with connect() as further:
        assert further.execute(SESSION).fetchone()[:2] == (True, "/CN=postgres")


def test_the_same_connection_without_the_client_certificate_or_without_tls_is_refused(tls_postgres, monkeypatch):
    """Without sslcert/sslkey the server asks for a certificate; with sslmode=disable it has no entry at all."""
    variable = f"AIRFLOW_CONN_{CONN_ID.upper()}"
    monkeypatch.setenv(variable, tls_postgres.airflow_connection(client_certificate=False))
    with pytest.raises(psycopg.OperationalError, match="requires a valid client certificate"):
        with pg_connection(CONN_ID):
            pass
    monkeypatch.setenv(variable, tls_postgres.airflow_connection(sslmode="disable"))
    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        with pg_connection(CONN_ID):
            pass


def test_sslmode_verify_full_refuses_the_server_when_sslrootcert_names_another_ca(tls_postgres, monkeypatch,
                                                                                   tmp_path):
    """sslrootcert reaches libpq too: with a CA that did not sign the server's certificate, libpq hangs up."""
    key = new_key()
    other_ca = write_pem(tmp_path / "other-ca.crt", certificate("another CA", key, None, key, ca=True))
    connection = tls_postgres.airflow_connection().replace(str(tls_postgres.ca_cert), str(other_ca))
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", connection)
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        with pg_connection(CONN_ID):
            pass


def test_python_m_blobgc_migrate_with_conn_id_migrates_over_the_same_tls_connection(tls_postgres, tls_connection,
                                                                                     capsys):
    """`python -m blobgc.migrate --conn-id` goes through pg_conninfo, client certificate included (the server
    admits nothing else): it migrates the TLS server's database, and `--status` then finds nothing pending."""
    assert migrate.main(["--conn-id", tls_connection]) == 0
    assert migrate.main(["--conn-id", tls_connection, "--status"]) == 0
    assert f"{len(migrations())} applied, 0 pending" in capsys.readouterr().out
