#!/usr/bin/env bash
# bubblewrap (bwrap) from Debian's packages: the sandbox the file and shell tools run in.
# Idempotent and quick when present; `apt-get update` runs only when the package is missing.
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then
  echo "bubblewrap: $(bwrap --version)" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "bubblewrap: bwrap is missing and apt-get is not available; install bubblewrap with your package manager" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
"${sudo[@]}" apt-get install -y -qq bubblewrap >&2
echo "bubblewrap: $(bwrap --version)" >&2
