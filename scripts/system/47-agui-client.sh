#!/usr/bin/env bash
# The official AG-UI client (@ag-ui/client, @ag-ui/core) at the versions pinned in
# scripts/npm/agui-client/package-lock.json, installed with `npm ci` into .tools/agui-client/.
# tests/server/test_agui_client.py drives it against `seamline serve` (POST /v1/agui).
# Idempotent and quick when the installed lock matches the committed one.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=scripts/npm/agui-client
dest=.tools/agui-client
if ! command -v npm >/dev/null 2>&1; then
  echo "agui-client: npm is missing; install Node.js 20 or newer (e.g. apt-get install nodejs npm)" >&2
  exit 1
fi
if [ -f "$dest/node_modules/@ag-ui/client/package.json" ] && [ -f "$dest/node_modules/@ag-ui/core/package.json" ] \
  && cmp -s "$src/package-lock.json" "$dest/package-lock.json"; then
  echo "agui-client: up to date in $dest" >&2
  exit 0
fi
mkdir -p "$dest"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
(cd "$dest" && npm ci --no-audit --no-fund --loglevel=error) >&2
echo "agui-client: installed @ag-ui/client" \
  "$(node -e 'console.log(require("./'"$dest"'/node_modules/@ag-ui/client/package.json").version)' 2>/dev/null)" >&2
