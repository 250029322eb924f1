"""bench/serve_load.py at tiny sizes, so it never rots: every run it makes checks itself
(the answer streamed to RUN_FINISHED). No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("ag_ui")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "serve_load.py"


def test_serve_bench_runs_and_checks_itself(tmp_path: Path, cli_env: dict[str, str]) -> None:
    out = tmp_path / "serve.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--runs", "5", "--processes", "1", "--out", str(out)],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert figures["server"]["runs"] == 5 and figures["process_per_run"]["runs"] == 1
    for side in ("server", "process_per_run"):
        assert figures[side]["runs_per_s"] > 0 and figures[side]["memory_per_run_kb"] is not None
    assert "concurrent streaming runs" in done.stdout
