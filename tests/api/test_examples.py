"""The five programs of docs/examples: they run on the scripted provider, and pass
``mypy --strict`` and ``pyright --strict``; a wrong keyword or name fails both checkers."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
PROGRAMS = ["hello", "tools", "streaming", "conversation", "guard"]
BAD = """\
import seamline

agent = seamline.Agent(provider="offline", instruction="a typo")
result = seamline.run_sync("hi", workspce=".")
other = seamline.Agnt()
"""


def _main(name: str) -> Any:
    return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=f"example_{name}")["main"]


def test_there_are_five_programs() -> None:
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == sorted(PROGRAMS)


def test_the_programs_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _main("hello")() == "Paris. (9 in, 2 out, $0.0001)"
    assert _main("tools")() == "Four teas cost $10.00."
    assert asyncio.run(_main("streaming")()) == "Streaming works. [completed]"
    assert asyncio.run(_main("conversation")(tmp_path)) == ["Noted: 42.", "You said 42.", "Still 42."]
    assert _main("guard")() == ["completed", "I may not delete it.", "stopped: deleting is not allowed"]


def _mypy(*paths: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MYPYPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", *map(str, paths)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def _pyright(folder: Path, *paths: Path) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec("pyright") is None:
        pytest.skip("pyright is not installed (pip install -c constraints.txt -e '.[dev]')")
    config = {"extraPaths": [str(ROOT / "src")], "typeCheckingMode": "strict", "pythonVersion": "3.11"}
    (folder / "pyrightconfig.json").write_text(json.dumps(config))
    command = [sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "-p", str(folder), *map(str, paths)]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300, check=False)


def test_the_programs_pass_mypy_strict() -> None:
    done = _mypy(EXAMPLES)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_keyword_fails_mypy_strict(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(BAD)
    done = _mypy(bad)
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'Unexpected keyword argument "instruction" for "Agent"' in done.stdout
    assert 'Unexpected keyword argument "workspce" for "run_sync"' in done.stdout
    assert 'Module has no attribute "Agnt"' in done.stdout  # the lazy loader is no Any to checkers


def test_the_programs_pass_pyright_strict(tmp_path: Path) -> None:
    done = _pyright(tmp_path, *sorted(EXAMPLES.glob("*.py")))
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_keyword_fails_pyright_strict(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(BAD)
    done = _pyright(tmp_path, bad)
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'No parameter named "instruction"' in done.stdout
    assert 'No parameter named "workspce"' in done.stdout
    assert '"Agnt" is not a known attribute of module' in done.stdout
