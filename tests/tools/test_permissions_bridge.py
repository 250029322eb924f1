"""The permission bridge: delegated prompts get the permission service's answers, over
MCP from our own client and from the real Claude Code (``--permission-prompt-tool``)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from seamline.events import Event, PermissionDecision, PermissionRequest
from seamline.sessions.rules import PermissionRules
from seamline.tools.base import ToolContext
from seamline.tools.mcp import McpToolSource
from seamline.tools.mcp_config import McpServerConfig
from seamline.tools.permission_bridge import PermissionBridge
from seamline.tools.permissions import PermissionService
from seamline.tools.sources import ToolSourceContext


async def _ask(bridge: PermissionBridge, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    source = McpToolSource([McpServerConfig(name="bridge", transport="http", url=bridge.url)])
    try:
        (approve,) = await source.get_tools(ToolSourceContext())
        ctx = ToolContext(call_id="c", session_id="s", turn_id=1, emit=lambda e: None)
        return [json.loads(await approve.invoke(call, ctx)) for call in calls]
    finally:
        await source.aclose()


@pytest.mark.real
def test_bridge_answers_with_the_services_decisions(tmp_path: Path) -> None:
    rules = PermissionRules(":memory:")
    rules.add("deny", tool="WebFetch")
    events: list[Event] = []

    async def go() -> list[dict[str, Any]]:
        service = PermissionService(rules=rules, workspace=tmp_path, yes=True)
        async with PermissionBridge(service, on_event=events.append) as bridge:
            assert bridge.url.startswith("http://127.0.0.1:")
            return await _ask(
                bridge,
                [
                    {"tool_name": "Read", "input": {"file_path": "notes.txt"}, "tool_use_id": "t1"},
                    {"tool_name": "Bash", "input": {"command": "make test"}, "tool_use_id": "t2"},
                    {"tool_name": "Bash", "input": {"command": "rm -rf /"}, "tool_use_id": "t3"},
                    {"tool_name": "WebFetch", "input": {"url": "https://example.com"}, "tool_use_id": "t4"},
                ],
            )

    read, make, wipe, fetch = asyncio.run(go())
    assert read == {"behavior": "allow", "updatedInput": {"file_path": "notes.txt"}}
    assert make == {"behavior": "allow", "updatedInput": {"command": "make test"}}  # --yes allows what would ask
    assert wipe["behavior"] == "deny" and wipe["message"].startswith("hard denial: recursive delete outside")
    assert fetch["behavior"] == "deny" and "denied by rule" in fetch["message"]
    requests = [e for e in events if isinstance(e, PermissionRequest)]
    assert [(r.tool, r.call_id) for r in requests] == [("Bash", "t2")]
    assert [(d.decision, d.request_id) for d in events if isinstance(d, PermissionDecision)] == [
        ("allow", "perm-t2"),
        ("deny", "perm-t3"),
        ("deny", "perm-t4"),
    ]


@pytest.mark.real
def test_real_claude_code_asks_the_bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.providers.agent_cli_support import AgentAnthropic, cli_path, make_world

    world = make_world(tmp_path, monkeypatch)
    victim = tmp_path / "outside"
    victim.mkdir()
    (victim / "keep.txt").write_text("still here")
    claude = cli_path("claude")
    script = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": f"rm -rf {victim}"}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "touch made.txt && echo bridged-and-allowed"}}]},
        {"text": "finished"},
    ]
    asked: list[Event] = []

    async def go(fake: AgentAnthropic) -> tuple[int, str]:
        service = PermissionService(workspace=world.workspace, yes=True)
        async with PermissionBridge(service, on_event=asked.append) as bridge:
            env = {**os.environ, "ANTHROPIC_BASE_URL": fake.root_url, "CLAUDE_CODE_MAX_RETRIES": "0"}
            env.pop("CLAUDECODE", None)
            proc = await asyncio.create_subprocess_exec(
                claude, "-p", "clean up", "--output-format", "stream-json", "--verbose",
                "--model", "claude-sonnet-4-5", *bridge.claude_args(),
                cwd=world.workspace, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )  # fmt: skip
            try:
                out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
            finally:
                if proc.returncode is None:
                    os.killpg(proc.pid, 9)
                    await proc.wait()
            return proc.returncode or 0, out.decode() + err.decode()

    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        code, output = asyncio.run(go(fake))
        turns = fake.turn_requests()
    assert code == 0, output[-2000:]
    assert (victim / "keep.txt").read_text() == "still here"
    decisions = [e for e in asked if isinstance(e, PermissionDecision)]
    assert [d.decision for d in decisions] == ["deny", "allow"], output[-2000:]
    assert (world.workspace / "made.txt").exists()
    assert decisions[0].reason.startswith("hard denial: recursive delete outside the workspace")
    # What Claude Code sent back to the model after each decision.
    results = [
        block
        for request in turns
        for message in request.body["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    texts = [json.dumps(r.get("content")) for r in results]
    assert any("hard denial" in t for t in texts), texts
    assert any("bridged-and-allowed" in t for t in texts), texts
