"""`seamline run --sandbox bwrap` in a git repository, then `seamline revert`: what git
ignores (a `.pyc`, build output) is not reported as the agent's change, `revert --list`
counts it apart, and the revert removes what the run created there and says which
ignored files it leaves as they are (their content was never journaled)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.sandbox.test_cli import _seamline

pytestmark = pytest.mark.real
_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def _repo(root: Path) -> Path:
    ws = root / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("print('hello')\n")
    (ws / ".gitignore").write_text("__pycache__/\nbuild/\n")
    who = ["-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "init.defaultBranch=main"]
    for args in (["init", "--quiet"], ["add", "."], ["commit", "--quiet", "-m", "init"]):
        subprocess.run(["git", *who, *args], cwd=ws, env=_ENV, check=True, capture_output=True)
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(b"old build\n")
    time.sleep(0.1)  # older than the journal's trust margin: git's word on them is taken
    return ws


def test_ignored_paths_are_not_the_agents_changes_and_revert_says_what_it_leaves(
    bwrap_ready: None, seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    ws = _repo(tmp_path)
    command = (
        "echo new > made.txt && echo rewritten > src/app.py && mkdir src/__pycache__ "
        "&& printf 'bytecode' > src/__pycache__/app.cpython-311.pyc && echo new build > build/out.o"
    )
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps([{"tool_calls": [{"name": "shell", "arguments": {"command": command}}]}, {"text": "done"}])
    )
    done = _seamline(
        seamline_cmd, cli_env, "run", "--provider", "scripted", "--provider-option", f"script={script}",
        "--sandbox", "bwrap", "--json", "-w", str(ws), "build it",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    run_id = events[0]["session_id"]
    changes = sorted((e["path"], e["kind"]) for e in events if e["type"] == "file_change")
    assert changes == [("made.txt", "created"), ("src/app.py", "edited")]

    listed = _seamline(seamline_cmd, cli_env, "revert", run_id, "--list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.rstrip().endswith("made.txt, src/app.py; 3 path(s) git ignores"), listed.stdout
    as_json = json.loads(_seamline(seamline_cmd, cli_env, "revert", run_id, "--list", "--json").stdout)
    assert sorted(as_json[0]["ignored"]) == ["build/out.o", "src/__pycache__", "src/__pycache__/app.cpython-311.pyc"]

    reverted = _seamline(seamline_cmd, cli_env, "revert", run_id)
    assert reverted.returncode == 0, reverted.stderr
    assert "left as they are (ignored by git, their content was never journaled): build/out.o" in reverted.stdout
    assert (ws / "src" / "app.py").read_text() == "print('hello')\n"  # from git's store, byte for byte
    assert not (ws / "made.txt").exists() and not (ws / "src" / "__pycache__").exists()
    assert (ws / "build" / "out.o").read_text() == "new build\n"
