"""Start bench targets in their own processes (bench/peers/run_peer.py) and collect figures.

seamline and the floor run under the interpreter running the bench (the main .venv); the
peers under bench/.venv/bin/python, installed by bench/setup-peers.sh. A process that runs
past its time limit is killed by its own PID and recorded as ``timeout``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent
RUN_PEER = BENCH / "peers" / "run_peer.py"
PEER_PYTHON = BENCH / ".venv" / "bin" / "python"
RESULT_MARK = "BENCH-RESULT "

OURS = ("floor", "seamline", "seamline_nostore", "seamline_agent", "seamline_agent_nostore")
PEERS = ("pydantic_ai", "openai_agents", "langgraph", "smolagents")
LABELS = {
    "floor": "floor (bare asyncio)",
    "seamline": "seamline",
    "seamline_nostore": "seamline (store off)",
    "seamline_agent": "seamline.Agent",
    "seamline_agent_nostore": "seamline.Agent (store off)",
    "pydantic_ai": "pydantic-ai",
    "openai_agents": "openai-agents",
    "langgraph": "langgraph",
    "smolagents": "smolagents",
}
# What a user imports to use each one (W6).
IMPORTS = {
    "floor": "asyncio",
    "seamline": "seamline",
    "seamline_nostore": "seamline",
    "seamline_agent": "seamline",
    "seamline_agent_nostore": "seamline",
    "pydantic_ai": "pydantic_ai",
    "openai_agents": "agents",
    "langgraph": "langgraph.prebuilt",
    "smolagents": "smolagents",
}


def peers_installed() -> bool:
    return PEER_PYTHON.exists()


def targets() -> tuple[list[str], str | None]:
    """The targets to run, and a note when the peers are left out."""
    if os.environ.get("SEAMLINE_BENCH_PEERS", "1") == "0":
        return list(OURS), "peers left out (SEAMLINE_BENCH_PEERS=0)"
    if not peers_installed():
        return list(OURS), "peers left out: bench/.venv is missing (run bash bench/setup-peers.sh)"
    return [*OURS, *PEERS], None


def python_for(target: str) -> str:
    return sys.executable if target in OURS else str(PEER_PYTHON)


def _tail(text: str, limit: int = 600) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def run_target(target: str, workload: str, *, options: Sequence[str] = (), timeout: float = 120.0) -> dict[str, Any]:
    """One measurement in a fresh process; always returns a dict with ``status``."""
    command = [python_for(target), str(RUN_PEER), target, workload, *options]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        # subprocess.run has killed and reaped the child by now
        return {"target": target, "status": "timeout", "timeout_s": timeout}
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            result: dict[str, Any] = json.loads(line[len(RESULT_MARK) :])
            if result.get("status") not in ("ok", "n/a"):
                print(f"  {target} {workload}: {result.get('status')}: {result.get('detail')}", file=sys.stderr)
            return result
    detail = _tail(done.stderr or done.stdout)
    print(f"  {target} {workload}: error (exit {done.returncode}): {detail}", file=sys.stderr)
    return {"target": target, "status": "error", "detail": detail, "exit": done.returncode}


def timed_process(
    command: Sequence[str],
    *,
    reps: int,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Median wall time of a command in fresh processes; each must exit 0."""
    walls: list[float] = []
    for _ in range(reps):
        started = time.perf_counter()
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, check=False
            )
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "timeout_s": timeout}
        walls.append(time.perf_counter() - started)
        if done.returncode != 0:
            return {"status": "error", "detail": _tail(done.stderr or done.stdout), "exit": done.returncode}
    return {"status": "ok", "ms": statistics.median(walls) * 1e3, "samples_ms": [w * 1e3 for w in walls]}


def import_ms(target: str, *, reps: int, timeout: float = 60.0) -> dict[str, Any]:
    """Median in-process time of the cold import of ``target``'s package, each in a fresh process."""
    module = IMPORTS[target]
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    times: list[float] = []
    for _ in range(reps):
        try:
            done = subprocess.run(
                [python_for(target), "-c", code], capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "timeout_s": timeout}
        if done.returncode != 0:
            return {"status": "error", "detail": _tail(done.stderr), "exit": done.returncode}
        times.append(float(done.stdout.strip().splitlines()[-1]) * 1e3)
    return {"status": "ok", "ms": statistics.median(times), "samples_ms": times, "module": module}


def metric(
    key: str,
    label: str,
    *,
    unit: str,
    better: str,
    values: dict[str, dict[str, Any]],
    field: str,
    goal: str = "",
    note: str = "",
) -> dict[str, Any]:
    """One row of the side-by-side table: ``field`` of each target's result."""
    cells: dict[str, dict[str, Any]] = {}
    for target, result in values.items():
        cell: dict[str, Any] = {"status": result.get("status", "error")}
        if cell["status"] == "ok" and field in result:
            cell["value"] = result[field]
        else:
            cell["detail"] = result.get("detail") or (
                f"over {result['timeout_s']:.0f} s" if "timeout_s" in result else ""
            )
            if cell["status"] == "ok":
                cell["status"] = "error"
        cells[target] = cell
    return {"key": key, "label": label, "unit": unit, "better": better, "goal": goal, "note": note, "cells": cells}
