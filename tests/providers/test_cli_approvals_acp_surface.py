"""Under `seamline acp`, Claude Code's and Codex's own tool calls are put to the ACP client:
seamline's acp provider drives `seamline acp --provider claude-code|codex` (the real
programs, against the fake Anthropic and OpenAI APIs on 127.0.0.1), and the client's answer
decides the call."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from seamline.events import Complete, PermissionRequest, ToolCall, ToolResult
from seamline.providers.acp.provider import AcpProvider
from seamline.tools.approval import YesApproval
from tests.providers.agent_cli_support import (
    ROOT,
    AgentAnthropic,
    AgentOpenAI,
    CliWorld,
    cli_path,
    make_world,
    run_async,
)

pytestmark = pytest.mark.real


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    w = make_world(tmp_path, monkeypatch)
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    return w


def _agent(fake: AgentAnthropic, store: Path) -> AcpProvider:
    argv = [
        sys.executable, "-m", "seamline", "acp", "--provider", "claude-code", "--model", "claude-sonnet-4-5",
        "-o", f"executable={cli_path('claude')}", "-o", f"base_url={fake.root_url}", "-o", "max_retries=0",
        "--store", str(store), "--cancel-grace", "1",
    ]  # fmt: skip
    options = {"command": shlex.join(argv), "grace": "1", "turn_timeout": "120"}
    return AcpProvider(options=options)


@pytest.mark.parametrize("client_says_yes", [False, True])
@run_async
async def test_the_acp_client_decides_claude_codes_shell_call(
    world: CliWorld, tmp_path: Path, client_says_yes: bool
) -> None:
    marker = world.workspace / "marker"
    script = [{"tool_calls": [{"name": "Bash", "arguments": {"command": f"touch {marker}"}}]}, {"text": "Done."}]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        client = _agent(fake, tmp_path / "inner.db")
        session = await client.open(workspace=world.workspace, approval=YesApproval(yes=client_says_yes))
        try:
            events = [e async for e in session.send("make the marker")]
        finally:
            await client.close(session)
    assert isinstance(events[-1], Complete) and events[-1].outcome == "completed"
    call = next(e for e in events if isinstance(e, ToolCall))
    asked = [e for e in events if isinstance(e, PermissionRequest)]
    assert [a.call_id for a in asked] == [call.call_id] and asked[0].arguments["command"] == f"touch {marker}"
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.is_error is not client_says_yes
    assert marker.exists() is client_says_yes


@pytest.mark.parametrize("client_says_yes", [False, True])
@run_async
async def test_the_acp_client_decides_codexs_shell_call(world: CliWorld, tmp_path: Path, client_says_yes: bool) -> None:
    marker = world.workspace / "marker"
    script = [{"tool_calls": [{"name": "exec_command", "arguments": {"cmd": f"touch {marker}"}}]}, {"text": "Done."}]
    with AgentOpenAI(script) as fake:
        argv = [
            sys.executable, "-m", "seamline", "acp", "--provider", "codex", "--model", "gpt-5.5",
            "-o", f"executable={cli_path('codex')}", "-o", f"base_url={fake.base_url}", "-o", "max_retries=0",
            "-o", "codex_sandbox=danger-full-access", "--store", str(tmp_path / "inner.db"), "--cancel-grace", "1",
        ]  # fmt: skip
        client = AcpProvider(options={"command": shlex.join(argv), "grace": "1", "turn_timeout": "120"})
        session = await client.open(workspace=world.workspace, approval=YesApproval(yes=client_says_yes))
        try:
            events = [e async for e in session.send("make the marker")]
        finally:
            await client.close(session)
    assert isinstance(events[-1], Complete) and events[-1].outcome == "completed"
    asked = [e for e in events if isinstance(e, PermissionRequest)]
    assert len(asked) == 1 and asked[0].arguments["command"] == f"touch {marker}", events
    results = [e for e in events if isinstance(e, ToolResult)]
    assert len(results) == 1 and results[0].is_error is not client_says_yes
    assert marker.exists() is client_says_yes
