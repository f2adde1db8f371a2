#!/usr/bin/env bash
# Installs Debian's `prometheus` package (Prometheus 2.42 and promtool) when missing, for the tests that check
# telemon's exposition with promtool. Its service is never started (.ci/apt-install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    bash .ci/apt-install.sh prometheus
fi
promtool --version | head -1
