"""The ``acp`` provider's classified failures and edges, against small scripted ACP agents.

The scripted agent below speaks the ACP wire as claude-agent-acp does (the messages in
``test_acp_real.py``, and the protocol's schema): ``initialize``, ``session/new``,
``session/prompt`` answered after ``session/update`` notifications. A ``MODE`` environment
variable makes it misbehave in one way each: exit mid-turn, print garbage, never answer,
ask for a permission, or use the client's file-system methods.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from seamline.events import Complete, Error, FileChange, PermissionDecision, ToolCall, ToolResult
from seamline.providers.acp.agent_process import running_agents
from seamline.providers.acp.provider import AcpProvider, AcpTranslator
from seamline.tools.approval import YesApproval
from seamline.transport.subprocess import group_members
from tests.providers.agent_cli_support import run_async

AGENT = r"""
import json, os, sys, time
MODE = os.environ.get("MODE", "ok")
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def update(sid, u):
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": u}})
def read():
    line = sys.stdin.readline()
    return json.loads(line) if line else None
asked = 100
while True:
    m = read()
    if m is None:
        sys.exit(0)
    if "method" not in m:
        continue  # an answer to our own request: handled where we wait for it
    method, mid, p = m["method"], m.get("id"), m.get("params") or {}
    if method == "initialize":
        if MODE == "silent_init":
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1,
              "agentCapabilities": {"loadSession": False}, "authMethods": []}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "sess-%d" % os.getpid()}})
    elif method == "session/cancel":
        pass
    elif method == "session/prompt":
        sid = p["sessionId"]
        update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "partial "}})
        if MODE == "exit":
            sys.stderr.write("agent crashed on purpose\n"); sys.stderr.flush()
            os._exit(7)
        if MODE == "garbage":
            sys.stdout.write("this is not json\n"); sys.stdout.flush()
            time.sleep(30)
        if MODE == "hang":
            time.sleep(60)
        if MODE in ("permission", "fs"):
            update(sid, {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Write f", "kind": "edit",
                         "status": "pending", "rawInput": {"path": "f.txt"}})
        if MODE == "permission":
            asked += 1
            send({"jsonrpc": "2.0", "id": asked, "method": "session/request_permission", "params": {
                "sessionId": sid, "toolCall": {"toolCallId": "t1", "kind": "edit", "title": "Write f"},
                "options": [{"kind": "allow_once", "name": "Allow", "optionId": "yes"},
                            {"kind": "reject_once", "name": "Reject", "optionId": "no"}]}})
            answer = read()
            outcome = answer["result"]["outcome"]
            chosen = outcome.get("optionId", outcome["outcome"])
            update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t1",
                         "status": "completed" if chosen == "yes" else "failed", "rawOutput": "chose " + chosen})
        if MODE == "fs":
            results = []
            for i, (method_name, params) in enumerate([
                ("fs/write_text_file", {"path": os.path.join(os.getcwd(), "made.txt"), "content": "hi\n"}),
                ("fs/read_text_file", {"path": os.path.join(os.getcwd(), "made.txt")}),
                ("fs/read_text_file", {"path": "/etc/passwd"}),
                ("fs/write_text_file", {"path": os.path.join(os.getcwd(), "..", "escape.txt"), "content": "x"}),
            ]):
                params["sessionId"] = sid
                send({"jsonrpc": "2.0", "id": 200 + i, "method": method_name, "params": params})
                results.append(read())
            update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed",
                         "rawOutput": json.dumps([r.get("result", r.get("error")) for r in results])})
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn",
              "usage": {"inputTokens": 10, "outputTokens": 2, "cachedReadTokens": 5, "cachedWriteTokens": 0,
                        "totalTokens": 17}}})
"""


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    script = tmp_path / "fake_acp_agent.py"
    script.write_text(AGENT)
    # The provider is "real" (a subprocess); this one is ours, so lift the test switch.
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)
    (tmp_path / "ws").mkdir()
    monkeypatch.chdir(tmp_path / "ws")
    return f"{sys.executable} {script}"


def provider(command: str, **options: str) -> AcpProvider:
    return AcpProvider(options={"command": command, "grace": "0.5", **options})


async def one_turn(p: AcpProvider, workspace: Path, *, approval: YesApproval | None = None) -> tuple[list[object], int]:
    session = await p.open(workspace=workspace, approval=approval)
    pgid = session.state["acp_agent"].rpc.process.pgid
    try:
        events = [e async for e in session.send("go")]
    finally:
        await p.close(session)
    assert group_members(pgid) == [], "the agent's process group outlived the session"
    assert running_agents() == []
    return events, pgid


@run_async
async def test_agent_exit_mid_turn_is_a_transport_failure(
    agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODE", "exit")
    events, _ = await one_turn(provider(agent), tmp_path / "ws")
    error = next(e for e in events if isinstance(e, Error))
    assert error.kind == "transport" and "exited with code 7" in error.message
    assert "crashed on purpose" in error.message  # the stderr tail says why
    final = events[-1]
    assert isinstance(final, Complete) and final.outcome == "failed"


@run_async
async def test_malformed_json_rpc_is_a_provider_failure(
    agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODE", "garbage")
    events, _ = await one_turn(provider(agent), tmp_path / "ws")
    error = next(e for e in events if isinstance(e, Error))
    assert error.kind == "provider" and "malformed JSON-RPC" in error.message and "not json" in error.message
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed"


@run_async
async def test_a_prompt_that_never_answers_times_out(
    agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODE", "hang")
    events, _ = await one_turn(provider(agent, turn_timeout="1"), tmp_path / "ws")
    error = next(e for e in events if isinstance(e, Error))
    assert error.kind == "timeout" and "timeout of 1 s" in error.message
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed"


@run_async
async def test_an_initialize_that_never_answers_fails_open_and_leaves_no_process(
    agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seamline.errors import TimeoutFailure

    monkeypatch.setenv("MODE", "silent_init")
    with pytest.raises(TimeoutFailure, match="initialize: no answer"):
        await provider(agent, request_timeout="0.5").open(workspace=tmp_path / "ws")
    assert running_agents() == []


@run_async
async def test_permission_allowed_with_yes_and_refused_without_a_policy(
    agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODE", "permission")
    allowed, _ = await one_turn(provider(agent), tmp_path / "ws", approval=YesApproval(yes=True))
    decision = next(e for e in allowed if isinstance(e, PermissionDecision))
    assert decision.decision == "allow"
    result = next(e for e in allowed if isinstance(e, ToolResult))
    assert result.output == "chose yes" and not result.is_error
    # An edit is a write-class tool: YesApproval without --yes refuses it.
    refused, _ = await one_turn(provider(agent), tmp_path / "ws", approval=YesApproval(yes=False))
    assert next(e for e in refused if isinstance(e, PermissionDecision)).decision == "deny"
    assert next(e for e in refused if isinstance(e, ToolResult)).output == "chose no"
    # No approval at all: refused too.
    bare, _ = await one_turn(provider(agent), tmp_path / "ws", approval=None)
    assert next(e for e in bare if isinstance(e, PermissionDecision)).decision == "deny"
    calls = [e for e in bare if isinstance(e, ToolCall)]
    assert len(calls) == 1 and calls[0].name == "edit"


@run_async
async def test_fs_methods_work_inside_the_workspace_only(
    agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODE", "fs")
    events, _ = await one_turn(provider(agent), tmp_path / "ws")
    assert (tmp_path / "ws" / "made.txt").read_text() == "hi\n"
    assert not (tmp_path / "escape.txt").exists()
    changes = [(Path(e.path).name, e.kind) for e in events if isinstance(e, FileChange)]
    assert changes == [("made.txt", "created"), ("made.txt", "read")]
    result = next(e for e in events if isinstance(e, ToolResult))
    assert '"content": "hi\\n"' in result.output
    assert result.output.count("outside the workspace") == 2


@run_async
async def test_usage_counts_cached_input_in_input(agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODE", "ok")
    events, _ = await one_turn(provider(agent), tmp_path / "ws")
    from seamline.events import Usage

    usage = next(e for e in events if isinstance(e, Usage))
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (15, 2, 5)
    assert usage.priced is False and usage.cost_usd is None  # no cost reported, no model to price
    assert isinstance(events[-1], Complete) and events[-1].text == "partial "


def test_missing_command_and_missing_executable_name_the_fix() -> None:
    import asyncio

    checks = asyncio.run(AcpProvider().preflight())
    assert not checks[0].ok and "command=" in checks[0].detail and checks[0].fix and "45-acp-opencode" in checks[0].fix
    checks = asyncio.run(AcpProvider(options={"command": "no-such-acp-agent --acp"}).preflight())
    assert not checks[0].ok and "no-such-acp-agent" in checks[0].detail
    assert checks[0].fix is not None and "claude-agent-acp@0.23.1" in checks[0].fix


def test_preflight_handshakes_with_the_agent_and_names_a_program_that_is_not_one(agent: str) -> None:
    import asyncio

    checks = asyncio.run(provider(agent).preflight())
    assert [c.name for c in checks] == ["executable", "initialize"] and all(c.ok for c in checks)
    assert "ACP protocol 1" in checks[1].detail and "no session/load" in checks[1].detail
    bad = asyncio.run(provider(f"{sys.executable} -c 'print(1)'").preflight())
    assert bad[1].name == "initialize" and not bad[1].ok and "malformed JSON-RPC" in bad[1].detail


def test_capabilities_are_declared() -> None:
    caps = AcpProvider.capabilities()
    assert (caps.forking, caps.session_ids, caps.resume, caps.cost_source, caps.runs_own_tools) == (
        "emulated",
        "provider",
        "native",
        "reported",
        True,
    )


def test_translator_tool_call_waits_for_its_arguments_and_plan_becomes_reasoning() -> None:
    t = AcpTranslator()
    assert t.feed({"sessionUpdate": "tool_call", "toolCallId": "a", "rawInput": {}, "status": "pending"}) == []
    out = t.feed(
        {"sessionUpdate": "tool_call_update", "toolCallId": "a", "rawInput": {"command": "ls"}, "kind": "execute"}
    )
    assert out == [ToolCall(call_id="a", name="execute", arguments={"command": "ls"}, source="acp")]
    done = t.feed({"sessionUpdate": "tool_call_update", "toolCallId": "a", "status": "failed",
                   "content": [{"type": "content", "content": {"type": "text", "text": "boom"}}]})  # fmt: skip
    assert done == [ToolResult(call_id="a", output="boom", is_error=True, name="execute")]
    plan = t.feed({"sessionUpdate": "plan", "entries": [{"content": "read", "status": "completed"}]})
    assert plan[0].type == "reasoning" and "[completed] read" in plan[0].text  # type: ignore[union-attr]
