#!/usr/bin/env bash
# The agent CLIs (Claude Code, Codex, Gemini CLI) at the versions pinned in
# scripts/npm/agent-clis/package-lock.json, installed with `npm ci` into .tools/agent-clis/.
# Idempotent and quick when the installed lock matches the committed one.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=scripts/npm/agent-clis
dest=.tools/agent-clis
if ! command -v npm >/dev/null 2>&1; then
  echo "agent-clis: npm is missing; install Node.js 20 or newer (e.g. apt-get install nodejs npm)" >&2
  exit 1
fi
if [ -x "$dest/node_modules/.bin/claude" ] && [ -x "$dest/node_modules/.bin/codex" ] \
  && [ -x "$dest/node_modules/.bin/gemini" ] && cmp -s "$src/package-lock.json" "$dest/package-lock.json"; then
  echo "agent-clis: up to date in $dest" >&2
  exit 0
fi
mkdir -p "$dest"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
(cd "$dest" && npm ci --no-audit --no-fund --loglevel=error) >&2
echo "agent-clis: installed claude $("$dest/node_modules/.bin/claude" --version 2>/dev/null | head -1)," \
  "codex $("$dest/node_modules/.bin/codex" --version 2>/dev/null | head -1)," \
  "gemini $("$dest/node_modules/.bin/gemini" --version 2>/dev/null | head -1)" >&2
