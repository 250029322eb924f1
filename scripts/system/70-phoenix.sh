#!/usr/bin/env bash
# Arize Phoenix, the OTLP consumer the telemetry tests send spans to, in its own virtual
# environment under .tools/phoenix (its many dependencies never meet seamline's). Pinned;
# idempotent: quick when the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=20.26.1
dest=.tools/phoenix
python=${PYTHON:-python3}
if [ -x "$dest/bin/phoenix" ] \
  && [ "$("$dest/bin/python" -c 'import importlib.metadata as m; print(m.version("arize-phoenix"))' 2>/dev/null)" = "$version" ]; then
  echo "phoenix: arize-phoenix $version up to date in $dest" >&2
  exit 0
fi
"$python" -m venv "$dest"
"$dest/bin/python" -m pip install --quiet --disable-pip-version-check "arize-phoenix==$version" >&2
echo "phoenix: installed arize-phoenix $version in $dest" >&2
