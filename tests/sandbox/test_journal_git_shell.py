"""A sandboxed `shell` step in a git repository lists only what the command changed: the
entries seamline itself makes in `.git` for the sandbox's read-only mounts (`commondir`,
`modules`, `hooks`) were listed by `revert --list` beside the one file the command wrote
(issue 44), and a worktree's `.git` file leads to nothing of the repository's."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from seamline.runner import run
from seamline.sandbox import EditJournal, ResourceLimits, SandboxPolicy, open_sandbox
from seamline.testing import scripted
from seamline.tools.workspace import Workspace, workspace_tools

pytestmark = pytest.mark.real
_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def git(cwd: Path, *args: str) -> None:
    who = ["-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "init.defaultBranch=main"]
    subprocess.run(["git", *who, *args], cwd=cwd, env=_ENV, check=True, capture_output=True)


def _shell_step(ws: Path, outputs: Path, journal: EditJournal) -> tuple[str, ...]:
    policy = SandboxPolicy(limits=ResourceLimits(wall_s=20))
    sandbox = open_sandbox("bwrap", workspace=ws, outputs=outputs, policy=policy)
    call = {"name": "shell", "arguments": {"command": "echo one > one.txt"}}
    provider = scripted([{"tool_calls": [call]}, {"text": "done"}])
    tools = workspace_tools(Workspace(ws), sandbox=sandbox, journal=journal)
    result = asyncio.run(run("go", provider=provider, workspace=ws, store=None, yes=True, tools=tools))
    [step] = journal.steps(result.session_id)
    assert step.tool == "shell"
    journal.revert(result.session_id)
    assert not (ws / "one.txt").exists()
    return step.paths


def _repo(where: Path) -> Path:
    where.mkdir()
    (where / "kept.txt").write_text("kept\n")
    git(where, "init", "--quiet")
    git(where, "add", ".")
    git(where, "commit", "--quiet", "-m", "init")
    return where


def test_a_shell_step_in_a_repository_lists_only_what_the_command_wrote(bwrap_ready: None, tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    assert not (repo / ".git" / "commondir").exists()  # git init makes none: seamline's mount needs one
    journal = EditJournal(tmp_path / "store.edits.db")
    assert _shell_step(repo, tmp_path / "out", journal) == ("one.txt",)
    assert (repo / ".git" / "commondir").read_text() == ".\n"  # made before the scan, kept


def test_a_shell_step_in_a_worktree_lists_only_what_the_command_wrote(bwrap_ready: None, tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    tree = tmp_path / "tree"
    git(repo, "worktree", "add", "--quiet", "-b", "side", str(tree))
    assert (tree / ".git").is_file()
    journal = EditJournal(tmp_path / "store.edits.db")
    assert _shell_step(tree, tmp_path / "out", journal) == ("one.txt",)
