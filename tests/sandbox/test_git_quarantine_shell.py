"""seamline's own `shell` tool in the bubblewrap tool sandbox: a nested repository the
command makes (config with a `core.fsmonitor` that the host's git would run in `sub`, added
as a gitlink) is quarantined before
the host's plain `git status` can recurse into it, with the edit journal and without."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from seamline.events import Error, Event, Raw, ToolResult
from seamline.runner import run
from seamline.sandbox import EditJournal, ResourceLimits, Sandbox, SandboxPolicy, open_sandbox
from seamline.testing import scripted
from seamline.tools.workspace import Workspace, workspace_tools

pytestmark = pytest.mark.real

NESTED = (
    "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b; "
    "mkdir -p sub && cd sub && git init -q && git commit -q --allow-empty -m s "
    "&& git config core.fsmonitor 'touch PWNED; false' && cd /workspace && git add sub && echo PLANTED"
)


def _host_git_status(ws: Path) -> None:
    """The user's own plain git: no GIT_CONFIG_* from seamline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "status"], cwd=ws, env=env, capture_output=True, timeout=60, check=False)


def _shell(sandbox: Sandbox, ws: Path, journal: EditJournal | None) -> tuple[ToolResult, list[Event]]:
    provider = scripted([{"tool_calls": [{"name": "shell", "arguments": {"command": NESTED}}]}, {"text": "done"}])
    tools = workspace_tools(Workspace(ws), sandbox=sandbox, journal=journal)
    result = asyncio.run(run("go", provider=provider, workspace=ws, store=None, yes=True, tools=tools))
    events: list[Event] = result.events
    [output] = [e for e in events if isinstance(e, ToolResult)]
    return output, events


@pytest.mark.parametrize("journaled", [True, False], ids=["journal", "no-journal"])
def test_a_nested_repository_from_the_shell_tool_is_quarantined(
    make_sandbox: Callable[..., Sandbox], host: dict[str, Path], tmp_path: Path, journaled: bool
) -> None:
    ws = host["ws"]
    subprocess.run(["git", "init", "-q", str(ws)], check=True, capture_output=True)
    journal = EditJournal(tmp_path / "store.edits.db") if journaled else None
    result, events = _shell(make_sandbox(), ws, journal)
    assert "PLANTED" in result.output
    _host_git_status(ws)
    assert not (ws / "sub" / "PWNED").exists()
    assert "[seamline: " in result.output and "sub/.git" in result.output  # the model is told too
    assert not (ws / "sub" / ".git").exists()
    [raw] = [e for e in events if isinstance(e, Raw) and isinstance(e.payload, dict) and "git_quarantine" in e.payload]
    assert [i["path"] for i in raw.payload["git_quarantine"]] == ["sub/.git"]
    assert any(isinstance(e, Error) and e.kind == "sandbox" for e in events)
    if journal is not None:
        steps = journal.steps(journal.run_ids()[0])
        assert [s.tool for s in steps] == ["shell", "git_quarantine"]
        journal.revert(journal.run_ids()[0], to_step=1)  # the repository, back byte for byte
        assert (ws / "sub" / ".git" / "config").is_file()
        assert b"fsmonitor" in (ws / "sub" / ".git" / "config").read_bytes()


def test_a_policy_can_allow_nested_repositories_in_the_shell_tool(bwrap_ready: None, host: dict[str, Path]) -> None:
    ws = host["ws"]
    subprocess.run(["git", "init", "-q", str(ws)], check=True, capture_output=True)
    policy = SandboxPolicy(nested_repositories=True, limits=ResourceLimits(wall_s=20))
    sandbox = open_sandbox("bwrap", workspace=ws, outputs=host["outputs"], policy=policy)
    _, events = _shell(sandbox, ws, None)
    assert (ws / "sub" / ".git" / "HEAD").is_file()  # kept: the policy allows it
    [raw] = [e for e in events if isinstance(e, Raw) and isinstance(e.payload, dict) and "git_quarantine" in e.payload]
    assert [i["path"] for i in raw.payload["git_quarantine"]] == ["sub/.git/config"]  # its config is not
    _host_git_status(ws)
    assert not (ws / "sub" / "PWNED").exists()
