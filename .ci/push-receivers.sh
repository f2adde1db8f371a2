#!/usr/bin/env bash
# What the push tests (crates/telemon/tests/push_receivers.rs) need, installed when missing:
# - Debian's `victoria-metrics` (VictoriaMetrics 1.79) besides `prometheus` (.ci/prometheus.sh);
# - a virtualenv at target/push-venv with `rotel` (an OTLP collector, a Rust binary inside the wheel)
#   and the official `opentelemetry-proto` package for the Python receiver that checks what arrives.
# No service is started: the tests run their own receivers on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v victoria-metrics >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        echo "victoria-metrics missing and not root: install Debian's victoria-metrics package" >&2
        exit 1
    fi
    policy=/usr/sbin/policy-rc.d
    had_policy=false
    [ -e "$policy" ] && had_policy=true && cp -p "$policy" "$policy.telemon-ci"
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod +x "$policy"
    restore() {
        if $had_policy; then mv -f "$policy.telemon-ci" "$policy"; else rm -f "$policy"; fi
    }
    trap restore EXIT
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends victoria-metrics python3-venv >/dev/null
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi

venv=target/push-venv
if ! "$venv/bin/python3" -c 'import opentelemetry.proto, rotel' >/dev/null 2>&1; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check rotel opentelemetry-proto
fi
victoria-metrics --version 2>/dev/null | head -1 || true
"$venv/bin/pip" list --disable-pip-version-check 2>/dev/null | grep -E '^(rotel|opentelemetry-proto) '
