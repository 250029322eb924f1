#!/usr/bin/env bash
# Chromium from Debian's packages: the headless browser the web page's tests drive with
# Playwright (launched at /usr/bin/chromium; Playwright's own browser download is not used).
# Idempotent and quick when present; `apt-get update` runs only when the package is missing.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  echo "chromium: $(/usr/bin/chromium --version 2>/dev/null || echo present)" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium: /usr/bin/chromium is missing and apt-get is not available; install chromium with your package manager" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
"${sudo[@]}" apt-get install -y -qq chromium >&2
echo "chromium: $(/usr/bin/chromium --version 2>/dev/null || echo installed)" >&2
