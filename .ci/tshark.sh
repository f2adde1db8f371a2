#!/usr/bin/env bash
# Installs Debian's `tshark` (with dumpcap) when missing, for the Wireshark dissector's tests. The
# wireshark-common question (may non-root users capture?) is answered first, so the install never prompts.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v tshark >/dev/null 2>&1 || ! command -v dumpcap >/dev/null 2>&1; then
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    bash .ci/apt-install.sh tshark
fi
tshark --version | head -1
