"""Agent(sandbox=...): the workspace tools, isolated by real bubblewrap, needing no yes."""

from __future__ import annotations

from pathlib import Path

import pytest

import seamline
from seamline.sandbox.probe import SandboxMode
from seamline.sessions import open_store
from seamline.testing import scripted

pytestmark = [pytest.mark.real, pytest.mark.usefixtures("bwrap_ready")]


@pytest.fixture(scope="session")
def bwrap_ready() -> None:
    from seamline.sandbox import probe

    report = probe("bwrap")
    if not report.ok:
        pytest.fail(f"bubblewrap cannot isolate here (bash scripts/system/20-bubblewrap.sh)\n{report.render()}")


def _shell(tmp_path: Path, *, sandbox: SandboxMode | None = None, workspace_tools: bool = False) -> seamline.ToolResult:
    (tmp_path / "hello.txt").write_text("hello from the workspace\n")
    provider = scripted(
        [{"tool_calls": [{"name": "shell", "arguments": {"command": "cat hello.txt"}}]}, {"text": "ok"}]
    )
    store = open_store(tmp_path / "store.db")
    try:
        agent = seamline.Agent(
            provider=provider, workspace=tmp_path, store=store, sandbox=sandbox, workspace_tools=workspace_tools
        )
        result = agent.run_sync("read it")
        assert store.require(result.session_id).run_options.get("sandbox") == sandbox
    finally:
        store.close()
    (found,) = [e for e in result.events if isinstance(e, seamline.ToolResult)]
    return found


def test_a_sandboxed_agent_runs_shell_commands_without_yes(tmp_path: Path) -> None:
    found = _shell(tmp_path, sandbox="bwrap")
    assert not found.is_error and "hello from the workspace" in found.output


def test_unsandboxed_workspace_tools_still_ask(tmp_path: Path) -> None:
    found = _shell(tmp_path, workspace_tools=True)
    assert found.is_error and "hello from the workspace" not in found.output
