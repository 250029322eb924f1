"""Golden tests: what the real ACP agents printed, played back through the ``acp`` provider.

The fixtures in ``tests/fixtures/acp/<agent>/`` were captured from claude-agent-acp 0.23.1,
``gemini --acp`` (Gemini CLI 0.61.0) and ``opencode acp`` (opencode-ai 1.18.33) against the
fake API servers (``tests/fixtures/acp_capture.py``). ``tests/fixtures/acp_replay.py`` plays
one back as an agent process, so the whole provider (JSON-RPC, routing, permission
answers, translation) runs on every recorded line in the recorded order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from seamline.errors import InvalidRequest
from seamline.events import (
    Complete,
    Error,
    Event,
    PermissionDecision,
    PermissionRequest,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from seamline.providers.acp.agent_process import running_agents
from seamline.providers.acp.provider import AcpProvider
from seamline.tools.approval import YesApproval
from seamline.transport.subprocess import group_members
from tests.providers.agent_cli_support import ROOT, run_async

FIXTURES = ROOT / "tests" / "fixtures" / "acp"
REPLAY = ROOT / "tests" / "fixtures" / "acp_replay.py"
AGENTS = ("claude-acp", "gemini-acp", "opencode-acp")


def records(agent: str, scenario: str) -> list[dict[str, Any]]:
    path = FIXTURES / agent / f"{scenario}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def agent_command(agent: str, scenario: str) -> str:
    return f"{sys.executable} {REPLAY} {FIXTURES / agent / f'{scenario}.jsonl'}"


@pytest.fixture(autouse=True)
def _replayed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The replay agent is our own program, not a provider's: lift the test switch.
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)
    (tmp_path / "ws").mkdir()
    monkeypatch.chdir(tmp_path / "ws")


async def replay_turn(
    agent: str, scenario: str, workspace: Path, *, abort_on_text: bool = False, **options: str
) -> list[Event]:
    provider = AcpProvider(options={"command": agent_command(agent, scenario), "grace": "0.5", **options})
    session = await provider.open(workspace=workspace, approval=YesApproval(yes=True))
    pgid = session.state["acp_agent"].rpc.process.pgid
    events: list[Event] = []
    try:
        async for event in session.send("go"):
            events.append(event)
            if abort_on_text and isinstance(event, TextDelta) and event.text.strip():
                await provider.abort(session)
    finally:
        await provider.close(session)
    assert group_members(pgid) == [], "the replay agent outlived the session"
    assert running_agents() == []
    assert sum(isinstance(e, Complete) for e in events) == 1 and isinstance(events[-1], Complete)
    return events


def only(events: list[Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


# -- item 4: 529 / overloaded is a retryable provider failure ------------------------------------


@pytest.mark.parametrize("agent", ["claude-acp", "gemini-acp"])
@run_async
async def test_overloaded_is_a_retryable_provider_error(agent: str, tmp_path: Path) -> None:
    events = await replay_turn(agent, "overloaded", tmp_path / "ws")
    (error,) = only(events, Error)
    assert (error.kind, error.retryable) == ("provider", True), error
    assert events[-1].outcome == "failed"  # type: ignore[union-attr]


# -- item 5: gemini's usage in result._meta.quota --------------------------------------------------


@run_async
async def test_gemini_usage_from_the_result_meta_quota(tmp_path: Path) -> None:
    events = await replay_turn("gemini-acp", "plain", tmp_path / "ws")
    (usage,) = only(events, Usage)
    assert (usage.input_tokens, usage.output_tokens) == (30, 5)
    assert isinstance(events[-1], Complete) and events[-1].text == "Hello from the fake."


# -- item 6: tool names and arguments of the non-Claude agents -----------------------------------


@run_async
async def test_opencode_tool_call_carries_the_command_and_the_tool_name(tmp_path: Path) -> None:
    events = await replay_turn("opencode-acp", "tools", tmp_path / "ws")
    (call,) = only(events, ToolCall)
    assert call.name == "bash"
    assert call.arguments["command"] == "cat notes.txt" and call.arguments["description"] == "Print the notes"
    (result,) = only(events, ToolResult)
    assert result.call_id == call.call_id and "pelican" in result.output and not result.is_error


@pytest.mark.parametrize("scenario", ["tools", "permission"])
@run_async
async def test_gemini_tool_call_is_named_by_the_tool_not_the_kind(scenario: str, tmp_path: Path) -> None:
    events = await replay_turn("gemini-acp", scenario, tmp_path / "ws")
    (call,) = only(events, ToolCall)
    assert call.name == "run_shell_command"
    command = "cat notes.txt" if scenario == "tools" else "echo hello > out.txt"
    assert call.arguments == {"command": command}  # gemini sends no rawInput; a shell call's title is its command
    if scenario == "permission":
        (request,) = only(events, PermissionRequest)
        assert request.tool == "run_shell_command" and request.call_id == call.call_id


# -- item 7: the permission request comes after the queued updates that name the tool -------------


@run_async
async def test_claude_permission_names_the_tool_from_the_updates_before_it(tmp_path: Path) -> None:
    events = await replay_turn("claude-acp", "permission", tmp_path / "ws")
    (call,) = only(events, ToolCall)
    assert call.name == "Bash" and call.arguments == {"command": "echo hello > out.txt"}
    (request,) = only(events, PermissionRequest)
    assert request.tool == "Bash" and request.arguments == {"command": "echo hello > out.txt"}
    assert only(events, PermissionDecision)[0].decision == "allow"
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ToolCall") < kinds.index("PermissionRequest") < kinds.index("ToolResult")


# -- item 8: text before and after a tool call stays two blocks ----------------------------------


@pytest.mark.parametrize("agent", AGENTS)
@run_async
async def test_text_before_and_after_a_tool_call_are_separate_blocks(agent: str, tmp_path: Path) -> None:
    events = await replay_turn(agent, "tools", tmp_path / "ws")
    texts = [e.text for e in only(events, Text)]
    assert texts == ["Let me look.", "The word is pelican."]
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("Text") < kinds.index("ToolCall")
    assert isinstance(events[-1], Complete) and events[-1].text == "The word is pelican."


# -- item 9: an aborted turn keeps what streamed -------------------------------------------------


@pytest.mark.parametrize("agent", ["claude-acp", "gemini-acp"])
@run_async
async def test_aborted_turn_keeps_the_text_that_streamed(agent: str, tmp_path: Path) -> None:
    events = await replay_turn(agent, "abort", tmp_path / "ws", abort_on_text=True)
    final = events[-1]
    assert isinstance(final, Complete) and final.outcome == "aborted" and final.stop_reason == "cancelled"
    assert [e.text for e in only(events, Text)] == ["word0 "]
    assert final.text == "word0 "


# -- item 14: authenticate when the agent lists auth methods and the session needs it -------------


@run_async
async def test_gemini_authenticates_when_session_new_asks_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "fake-gemini-capture")
    provider = AcpProvider(options={"command": agent_command("gemini-acp", "no_auth"), "grace": "0.5"})
    session = await provider.open(workspace=tmp_path / "ws")
    try:
        recorded = records("gemini-acp", "no_auth")[-1]["message"]["result"]["sessionId"]
        assert session.provider_session_id == recorded
    finally:
        await provider.close(session)
    assert running_agents() == []


# -- resume of an id the agent does not know ------------------------------------------------------


@pytest.mark.parametrize("agent", AGENTS)
@run_async
async def test_resume_of_an_unknown_session_is_an_invalid_request(agent: str, tmp_path: Path) -> None:
    from seamline.sessions.sqlite_store import SQLiteStore

    store = SQLiteStore(tmp_path / "store.db")
    unknown = next(
        r["message"]["params"]["sessionId"]
        for r in records(agent, "resume_unknown")
        if r["message"].get("method") in ("session/load", "session/resume")
    )
    try:
        store.create_session("s-unknown", provider="acp", model=None, workspace=str(tmp_path / "ws"))
        store.set_provider_session_id("s-unknown", unknown)
        provider = AcpProvider(options={"command": agent_command(agent, "resume_unknown"), "grace": "0.5"})
        with pytest.raises(InvalidRequest, match=r"no session|not found|No previous sessions"):
            await provider.resume("s-unknown", store=store)
    finally:
        store.close()
    assert running_agents() == []


# -- a cut stream ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("agent", "streamed"), [("gemini-acp", "a cut answer "), ("opencode-acp", "a cut ")])
@run_async
async def test_cut_stream_is_a_retryable_transport_error(agent: str, streamed: str, tmp_path: Path) -> None:
    events = await replay_turn(agent, "cut", tmp_path / "ws")
    (error,) = only(events, Error)
    assert (error.kind, error.retryable) == ("transport", True), error
    assert "".join(e.text for e in only(events, TextDelta)) == streamed


@pytest.mark.parametrize("ending", ["never", "error"])
@run_async
async def test_aborted_turn_that_the_agent_does_not_settle_keeps_the_text(ending: str, tmp_path: Path) -> None:
    # The recorded abort, with the agent's "cancelled" answer left out (it never settles) or
    # turned into an error response (as an agent that fails the cancelled prompt does).
    played = records("gemini-acp", "abort")
    last = played.pop()
    assert last["message"]["result"]["stopReason"] == "cancelled"
    if ending == "error":
        played.append({"from": "agent", "message": {"jsonrpc": "2.0", "id": last["message"]["id"],
                       "error": {"code": -32603, "message": "Internal error: aborted"}}})  # fmt: skip
    fixture = tmp_path / "abort.jsonl"
    fixture.write_text("".join(json.dumps(r) + "\n" for r in played))
    provider = AcpProvider(
        options={"command": f"{sys.executable} {REPLAY} {fixture}", "grace": "0.5", "cancel_timeout": "0.5"}
    )
    session = await provider.open(workspace=tmp_path / "ws", approval=YesApproval(yes=True))
    events: list[Event] = []
    try:
        async for event in session.send("go"):
            events.append(event)
            if isinstance(event, TextDelta) and event.text.strip():
                await provider.abort(session)
    finally:
        await provider.close(session)
    assert running_agents() == []
    final = events[-1]
    assert isinstance(final, Complete) and final.outcome == "aborted" and final.text == "word0 "
    assert [e.text for e in only(events, Text)] == ["word0 "]


# -- every captured turn, end to end ----------------------------------------------------------------

TURNS = [
    (agent, scenario)
    for agent in AGENTS
    for scenario in ("plain", "tools", "permission", "overloaded", "cut", "abort")
    if (FIXTURES / agent / f"{scenario}.jsonl").exists()
]
TOOL = {"claude-acp": "Bash", "gemini-acp": "run_shell_command", "opencode-acp": "bash"}


@pytest.mark.parametrize(("agent", "scenario"), TURNS)
@run_async
async def test_every_captured_turn_ends_right(agent: str, scenario: str, tmp_path: Path) -> None:
    events = await replay_turn(agent, scenario, tmp_path / "ws", abort_on_text=scenario == "abort")
    final = events[-1]
    assert isinstance(final, Complete)
    errors = [(e.kind, e.retryable) for e in only(events, Error)]
    streamed = "".join(e.text for e in only(events, TextDelta))
    texts = [e.text for e in only(events, Text)]
    if scenario == "overloaded":
        assert errors == [("provider", True)] and final.outcome == "failed"
    elif scenario == "cut" and agent != "claude-acp":
        assert errors == [("transport", True)] and final.outcome == "failed"
    elif scenario == "abort":
        assert errors == [] and final.outcome == "aborted" and final.text == streamed == "".join(texts)
    else:
        expected = {"plain": "Hello from the fake.", "tools": "The word is pelican.", "permission": "Wrote it."}
        # claude-agent-acp ends a cut stream as a plain end_turn without text.
        want = "" if scenario == "cut" else expected[scenario]
        assert errors == [] and final.outcome == "completed" and final.text == want
        assert texts[-1:] == ([want] if want else [])
        assert "".join(texts) == streamed
        usage = only(events, Usage)
        assert len(usage) == 1 and (usage[0].output_tokens > 0 or scenario == "cut")
    calls = only(events, ToolCall)
    results = only(events, ToolResult)
    if scenario in ("tools", "permission"):
        command = "cat notes.txt" if scenario == "tools" else "echo hello > out.txt"
        assert [c.name for c in calls] == [TOOL[agent]]
        assert calls[0].arguments.get("command", calls[0].arguments.get("title")) == command
        assert [r.call_id for r in results] == [calls[0].call_id] and not results[0].is_error
    else:
        assert calls == [] and results == []
