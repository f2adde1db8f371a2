#!/usr/bin/env bash
# The Debian package (issue 48): installs what building and checking it needs when missing (cargo-deb is
# installed by `cargo xtask deb` itself, pinned), then `cargo xtask deb --test`: a release build, the package,
# and crates/telemon/tests/package.rs on it, which lints it and installs, upgrades and purges it on this machine
# (CI runs as root on a machine of its own). Its own step, not part of `cargo test`: the release build takes
# minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v lintian >/dev/null 2>&1 || missing+=(lintian)
command -v man >/dev/null 2>&1 || missing+=(man-db)
command -v dpkg-shlibdeps >/dev/null 2>&1 || missing+=(dpkg-dev)
command -v deb-systemd-helper >/dev/null 2>&1 || missing+=(init-system-helpers)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
if [ "${#missing[@]}" -gt 0 ]; then
    bash .ci/apt-install.sh "${missing[@]}"
fi
lintian --version

cargo xtask deb --test
