#!/usr/bin/env bash
# tmux from Debian's packages: the real terminal the CLI's terminal tests type into.
# Idempotent and quick when present; `apt-get update` runs only when the package is missing.
set -euo pipefail
if command -v tmux >/dev/null 2>&1; then
  echo "tmux: $(tmux -V)" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "tmux: tmux is missing and apt-get is not available; install tmux with your package manager" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" != 0 ]; then
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
"${sudo[@]}" apt-get install -y -qq tmux >&2
echo "tmux: $(tmux -V)" >&2
