#!/usr/bin/env bash
# Installs Debian's `chromium` and `chromium-driver` when missing: the web view's tests drive a headless Chromium
# through chromedriver (WebDriver). Nothing is started here; each test starts its own chromedriver.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    bash .ci/apt-install.sh chromium chromium-driver
fi
chromium --version | head -1
