#!/usr/bin/env bash
# The full side-by-side bench in one command: install the pinned peers into bench/.venv
# (once), run every workload for seamline, the peers and the floor, write
# bench/results/latest.json and put the table into bench/README.md. About 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/setup-peers.sh
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
"$PY" bench/run.py "$@"
"$PY" bench/report.py bench/results/latest.json --readme >/dev/null
echo "table written to bench/README.md" >&2
