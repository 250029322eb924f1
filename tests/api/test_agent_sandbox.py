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


# In bubblewrap the workspace is /workspace, the host name `sandbox`, the user id 1000.
_PROBE = "cat hello.txt; echo cwd=$(pwd); echo host=$(hostname); echo uid=$(id -u); touch ran"


def _shell(tmp_path: Path, *, sandbox: SandboxMode | None = None, workspace_tools: bool = False) -> seamline.ToolResult:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("hello from the workspace\n")
    provider = scripted([{"tool_calls": [{"name": "shell", "arguments": {"command": _PROBE}}]}, {"text": "ok"}])
    store = open_store(tmp_path / "store.db")
    try:
        agent = seamline.Agent(
            provider=provider, workspace=ws, store=store, sandbox=sandbox, workspace_tools=workspace_tools
        )
        result = agent.run_sync("read it")
        assert store.require(result.session_id).run_options.get("sandbox") == sandbox
    finally:
        store.close()
    (found,) = [e for e in result.events if isinstance(e, seamline.ToolResult)]
    return found


def test_a_sandboxed_agent_runs_shell_commands_without_yes(tmp_path: Path) -> None:
    """It ran (no yes needed) and it ran inside bubblewrap: the sandbox's folder and host
    name and user, and its writes land in the workspace."""
    found = _shell(tmp_path, sandbox="bwrap")
    assert "hello from the workspace" in found.output, found.output
    assert "cwd=/workspace" in found.output and "host=sandbox" in found.output, found.output
    assert "uid=1000" in found.output, found.output
    assert (tmp_path / "ws" / "ran").exists()  # the workspace is the sandbox's /workspace


def test_unsandboxed_workspace_tools_still_ask(tmp_path: Path) -> None:
    """Without a sandbox and without yes the shell call is refused before it runs."""
    found = _shell(tmp_path, workspace_tools=True)
    assert found.is_error and "hello from the workspace" not in found.output
    assert "permission" in found.output.lower() or "denied" in found.output.lower(), found.output
    assert not (tmp_path / "ws" / "ran").exists()
