#!/usr/bin/env bash
# Debian's chromium for the reclaim page's browser test. Idempotent: does nothing when it is installed.
# Playwright drives it (executable_path=/usr/bin/chromium); `playwright install` is never used, since a
# test tool's own browser download does not work on a closed network.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "[chromium] installing Debian's chromium package (once per machine)"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
/usr/bin/chromium --version
