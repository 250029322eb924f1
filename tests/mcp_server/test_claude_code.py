"""The real Claude Code (pinned in .tools), against the local fake Anthropic API, with
``seamline mcp`` as its MCP server over stdio: it calls the seamline agent's tool and
gets the agent's answer back (the scripted provider answers for the agent)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes._http import RecordedRequest
from tests.mcp_server.support import READ_THEN_ANSWER, agents_file, scripted_agent, server_args, server_env
from tests.providers.agent_cli_support import AgentAnthropic, cli_path, make_world, request_texts


class ConversationAnthropic(AgentAnthropic):
    """The fake Anthropic API; a side request is one that asks for a JSON-schema answer (a
    session title), whatever else it carries (this Claude Code sends ``output_config``
    with its effort on every request)."""

    @staticmethod
    def _side(request: RecordedRequest) -> bool:
        body = request.body if isinstance(request.body, dict) else {}
        return not body.get("tools") or "format" in (body.get("output_config") or {})

    def _take(self, request: RecordedRequest) -> dict[str, Any] | None:
        if self._side(request):
            return {"text": '{"title": "side"}'}
        return super(AgentAnthropic, self)._take(request)

    def turn_requests(self) -> list[RecordedRequest]:
        return [r for r in self.model_requests() if not self._side(r)]


def test_claude_code_calls_a_seamline_agent_through_seamline_mcp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude = cli_path("claude")
    world = make_world(tmp_path, monkeypatch)
    ws = world.workspace
    (ws / "README.md").write_text("hello\n")
    agents = agents_file(tmp_path, {"helper": scripted_agent(ws, "helper", READ_THEN_ANSWER)})
    store = tmp_path / "store.db"
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": server_args(agents, store, ws),
        "env": server_env(tmp_path),
    }
    tool = "mcp__seamline__helper"
    script = [
        {"tool_calls": [{"id": "toolu_1", "name": tool, "arguments": {"task": "what does the readme say?"}}]},
        {"text": "seamline's helper answered."},
    ]
    with ConversationAnthropic(script=script) as fake:
        env = {
            **os.environ,
            "ANTHROPIC_BASE_URL": fake.root_url,
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "MCP_TIMEOUT": "60000",
            "MCP_CONNECTION_NONBLOCKING": "false",  # connect the MCP servers before the first request
        }
        done = subprocess.run(
            [
                claude,
                "-p",
                "ask the helper what the readme says",
                "--output-format",
                "stream-json",
                "--verbose",
                "--mcp-config",
                json.dumps({"mcpServers": {"seamline": server}}),
                "--strict-mcp-config",
                "--allowedTools",
                tool,
            ],
            cwd=str(ws),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        turns = fake.turn_requests()
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    # The model was offered the seamline tool (Claude Code connects its MCP servers in the background).
    assert tool in request_texts(turns[0].body), done.stderr[-2000:]
    # The model's tool call went to seamline, and the agent's answer came back as its result.
    assert len(turns) == 2, done.stderr[-2000:]
    assert "The readme says hello." in request_texts(turns[1].body)
    results = [line for line in lines if line.get("type") == "result"]
    assert results and results[-1]["result"] == "seamline's helper answered.", done.stdout[-2000:]
    assert done.returncode == 0
