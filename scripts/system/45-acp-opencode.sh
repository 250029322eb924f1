#!/usr/bin/env bash
# The ACP agent adapter (claude-agent-acp, which bundles its own Claude Code) and the
# OpenCode server, at the versions pinned in scripts/npm/acp-opencode/package-lock.json,
# installed with `npm ci` into .tools/acp-opencode/. Idempotent and quick when the
# installed lock matches the committed one.
# Note on the lock: opencode-ai lists a native package per platform as optional
# dependencies; the registry these machines use holds only the linux-x64 ones, so npm
# wrote the lock without the others and `npm ci` refused it. The lock's opencode-ai entry
# therefore lists only opencode-linux-x64 and opencode-linux-x64-baseline (edited by hand;
# re-create it with `npm install --package-lock-only` where every platform package resolves).
set -euo pipefail
cd "$(dirname "$0")/../.."
src=scripts/npm/acp-opencode
dest=.tools/acp-opencode
if ! command -v npm >/dev/null 2>&1; then
  echo "acp-opencode: npm is missing; install Node.js 20 or newer (e.g. apt-get install nodejs npm)" >&2
  exit 1
fi
bin="$dest/node_modules/.bin"
if [ -x "$bin/claude-agent-acp" ] && [ -x "$bin/opencode" ] \
  && cmp -s "$src/package-lock.json" "$dest/package-lock.json"; then
  echo "acp-opencode: up to date in $dest" >&2
  exit 0
fi
mkdir -p "$dest"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
(cd "$dest" && npm ci --no-audit --no-fund --loglevel=error) >&2
echo "acp-opencode: installed opencode $("$bin/opencode" --version 2>/dev/null | head -1)," \
  "claude-agent-acp $(node -e 'console.log(require("./'"$dest"'/node_modules/@zed-industries/claude-agent-acp/package.json").version)' 2>/dev/null)" >&2
