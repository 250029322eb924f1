#!/usr/bin/env bash
# The reference MCP server (@modelcontextprotocol/server-everything) and the MCP Inspector
# CLI (@modelcontextprotocol/inspector-cli) from the npm registry, at the versions pinned in
# scripts/npm/mcp-servers/package-lock.json, installed with `npm ci` into .tools/mcp-servers/.
# Idempotent: quick when the lock is unchanged.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=scripts/npm/mcp-servers
dest=.tools/mcp-servers
entry=$dest/node_modules/@modelcontextprotocol/server-everything/dist/index.js
inspector=$dest/node_modules/.bin/mcp-inspector-cli
if ! command -v npm >/dev/null 2>&1; then
  echo "mcp-servers: npm is missing; install Node.js 18+ (apt-get install nodejs npm)" >&2
  exit 1
fi
mkdir -p "$dest"
if [ -f "$entry" ] && [ -x "$inspector" ] && cmp -s "$src/package-lock.json" "$dest/package-lock.json"; then
  echo "mcp-servers: up to date ($entry)" >&2
  exit 0
fi
cp "$src/package.json" "$src/package-lock.json" "$dest/"
(cd "$dest" && npm ci --no-audit --no-fund --loglevel=error) >&2
test -f "$entry" || { echo "mcp-servers: $entry missing after npm ci" >&2; exit 1; }
test -x "$inspector" || { echo "mcp-servers: $inspector missing after npm ci" >&2; exit 1; }
echo "mcp-servers: installed server-everything" \
  "$(node -p "require('./$dest/node_modules/@modelcontextprotocol/server-everything/package.json').version")," \
  "inspector-cli $(node -p "require('./$dest/node_modules/@modelcontextprotocol/inspector-cli/package.json').version")" >&2
