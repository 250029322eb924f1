"""bench/many_agents.py and bench/many_roles.py at their smallest sizes, so they never rot:
each run checks its own turns and what is left after close (a leftover makes it exit 1).
No figure is asserted beyond its presence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.providers.agent_cli_support import cli_path

pytest.importorskip("uvicorn")
pytestmark = pytest.mark.real
BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(tmp_path: Path, cli_env: dict[str, str], script: str, *args: str) -> dict[str, object]:
    cli_path("claude"), cli_path("codex")  # fails, naming the set-up command, when they are missing
    out = tmp_path / "out.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args, "--out", str(out)],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures: dict[str, object] = json.loads(out.read_text())
    return figures


def test_the_many_sessions_bench_runs_and_leaves_nothing(tmp_path: Path, cli_env: dict[str, str]) -> None:
    figures = _run(tmp_path, cli_env, "many_agents.py", "--claude", "1", "--codex", "1", "--turns", "2")
    left = figures["after_close"]
    assert isinstance(left, dict) and left["processes_left"] == 0 and left["other_fds_over_idle"] == []
    latency = figures["line_to_event"]
    assert isinstance(latency, dict) and latency["n"] == 2


def test_the_many_roles_bench_runs_and_leaves_nothing(tmp_path: Path, cli_env: dict[str, str]) -> None:
    figures = _run(tmp_path, cli_env, "many_roles.py", "--agents", "2")
    for kind in ("race", "pipeline"):
        run = figures[kind]
        assert isinstance(run, dict) and run["outcome"] == "completed" and run["left_after"] == []
