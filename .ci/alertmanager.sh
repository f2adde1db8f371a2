#!/usr/bin/env bash
# Installs Debian's `prometheus-alertmanager` package (Alertmanager 0.25 as `prometheus-alertmanager`, and
# `amtool`) when missing, for the alert test (crates/telemon/tests/alerts.rs), which starts its own Alertmanager on
# a free loopback port. Its service is never started (.ci/apt-install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v prometheus-alertmanager >/dev/null 2>&1 || ! command -v amtool >/dev/null 2>&1; then
    bash .ci/apt-install.sh prometheus-alertmanager
fi
prometheus-alertmanager --version 2>&1 | head -1
