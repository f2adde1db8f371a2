#!/usr/bin/env bash
# What the push tests (crates/telemon/tests/push_receivers.rs) need, installed when missing:
# - Debian's `victoria-metrics` (VictoriaMetrics 1.79) besides `prometheus` (.ci/prometheus.sh);
# - a virtualenv at target/push-venv with `rotel` (an OTLP collector, a Rust binary inside the wheel)
#   and the official `opentelemetry-proto` package for the Python receiver that checks what arrives.
# No service is started (.ci/apt-install.sh): the tests run their own receivers on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v victoria-metrics >/dev/null 2>&1; then
    bash .ci/apt-install.sh victoria-metrics python3-venv
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    bash .ci/apt-install.sh python3-venv
fi

venv=target/push-venv
if ! "$venv/bin/python3" -c 'import opentelemetry.proto, rotel' >/dev/null 2>&1; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check rotel opentelemetry-proto
fi
victoria-metrics --version 2>/dev/null | head -1 || true
"$venv/bin/pip" list --disable-pip-version-check 2>/dev/null | grep -E '^(rotel|opentelemetry-proto) '
