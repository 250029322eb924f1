#!/usr/bin/env bash
# Install the peer frameworks (bench/peers/requirements.txt) into bench/.venv, apart from the
# main .venv so that they never leak into seamline's own environment or tests. Idempotent: a
# second run with the same pins only checks them.
set -euo pipefail
cd "$(dirname "$0")"
# The interpreter of the main .venv (the Python seamline is measured on), unless PYTHON says otherwise.
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if [ -x ../.venv/bin/python ]; then PY=../.venv/bin/python; else PY=python3; fi
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
    .venv/bin/python -m pip install --quiet --upgrade pip
fi
stamp=.venv/.peers-installed
if [ -f "$stamp" ] && cat peers/requirements.txt peers/constraints.txt | cmp -s "$stamp" -; then
    echo "peers already installed in bench/.venv" >&2
    exit 0
fi
.venv/bin/python -m pip install --quiet -r peers/requirements.txt -c peers/constraints.txt
cat peers/requirements.txt peers/constraints.txt > "$stamp"
.venv/bin/python -m pip freeze > .venv/.peers-freeze.txt
echo "peers installed in bench/.venv:" >&2
grep -iE '^(pydantic-ai-slim|openai-agents|langgraph|langchain-core|smolagents)==' .venv/.peers-freeze.txt >&2
