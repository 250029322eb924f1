"""`seamline revert RUN` of a run it cannot revert says why in one line and what to do
instead: a worktree run is undone with `seamline discard`, a model-API run's edits are
journaled only with `--sandbox`, an unknown id is looked up with `sessions list`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from seamline.sandbox.journal import EditJournal, journal_path_for
from tests.worktrees.git_repo import environ_with, git_home, make_repo


@pytest.fixture
def world(tmp_path: Path, cli_env: dict[str, str]) -> dict[str, Any]:
    env = environ_with({**cli_env, **git_home(tmp_path / "home")})
    script = tmp_path / "write.json"
    call = {"name": "write_file", "arguments": {"path": "notes.txt", "content": "hi\n"}}
    script.write_text(json.dumps([{"tool_calls": [call]}, {"text": "wrote notes.txt"}]))
    return {"env": env, "repo": make_repo(tmp_path / "repo", env), "store": tmp_path / "store.db", "script": script}


def _seamline(cmd: list[str], world: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, *args, "--store", str(world["store"])], env=world["env"], capture_output=True, text=True, timeout=120
    )


def _run(cmd: list[str], world: dict[str, Any], *extra: str) -> str:
    done = _seamline(
        cmd, world, "run", "--json", "-p", "scripted", "-o", f"script={world['script']}", "--yes",
        "-w", str(world["repo"]), *extra, "go",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout.splitlines()[0])["session_id"])


def _refused(cmd: list[str], world: dict[str, Any], run_id: str) -> str:
    done = _seamline(cmd, world, "revert", run_id)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, lines
    return lines[0]


@pytest.mark.parametrize("journal_file", [False, True], ids=["no-journal-file", "journal-without-the-run"])
def test_reverting_a_run_without_a_journal_says_what_to_do_instead(
    seamline_cmd: list[str], world: dict[str, Any], journal_file: bool
) -> None:
    tree_run = _run(seamline_cmd, world, "--worktree")
    plain_run = _run(seamline_cmd, world)
    if journal_file:  # another run was journaled: the file is there, without these runs
        EditJournal(journal_path_for(world["store"])).close()
    assert journal_path_for(world["store"]).exists() == journal_file

    line = _refused(seamline_cmd, world, tree_run[:12])
    assert f"run {tree_run[:12]} is a worktree run" in line
    assert f"seamline diff {tree_run[:12]}" in line and f"seamline discard {tree_run[:12]}" in line

    line = _refused(seamline_cmd, world, plain_run)
    assert f"run {plain_run[:12]} has no edit journal" in line
    assert "seamline run --sandbox" in line and "agent CLI" in line and "scripted" in line

    line = _refused(seamline_cmd, world, "feedface0000")
    assert "no run 'feedface0000'" in line and "seamline sessions list" in line
