#!/usr/bin/env bash
# Installs Debian packages (the arguments) without starting their services: a policy-rc.d refuses every
# service start while apt runs, and a service that was started anyway is stopped. The tests start their own
# instances on free loopback ports when they need one.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "missing and not root: install Debian's $*" >&2
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
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
for package in "$@"; do
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$package" 2>/dev/null; then
        systemctl stop "$package" || true
        systemctl disable "$package" >/dev/null 2>&1 || true
    fi
    pkill -x "$package" 2>/dev/null || true
done
