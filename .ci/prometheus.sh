#!/usr/bin/env bash
# Installs Debian's `prometheus` package (Prometheus 2.42 and promtool) when missing, for the tests that check
# telemon's exposition with promtool. The package's service is never started: a policy-rc.d refuses it while
# apt runs, and the tests start their own Prometheus on a free loopback port when they need one.
set -euo pipefail

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "prometheus/promtool missing and not root: install Debian's prometheus package" >&2
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
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# Should a service manager have started it anyway, stop it: tests run their own.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    systemctl stop prometheus || true
    systemctl disable prometheus >/dev/null 2>&1 || true
fi
pkill -x prometheus 2>/dev/null || true
promtool --version | head -1
