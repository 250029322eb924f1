"""seamline's own ``acp`` provider driving ``seamline acp --provider scripted``: a round
trip through the whole stack (provider → JSON-RPC → agent → seam → scripted provider)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.events import Complete, Error, PermissionRequest, Text, TextDelta, ToolCall, ToolResult, Usage
from seamline.providers.acp.agent_process import running_agents
from seamline.providers.acp.provider import AcpProvider
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools.approval import YesApproval
from seamline.transport.subprocess import group_members
from tests.acp_agent.support import FAILING, SLOW, WRITE_NOTE, agent_command, write_script
from tests.providers.agent_cli_support import run_async

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # AcpProvider starts a program, so it counts as real; this program is ours.
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    (tmp_path / "ws").mkdir()
    return tmp_path


def provider(command: str, cancel_timeout: str = "5") -> AcpProvider:
    options = {"command": command, "grace": "1", "cancel_timeout": cancel_timeout, "turn_timeout": "60"}
    return AcpProvider(options=options)


@run_async
async def test_a_tool_calling_turn_with_permission_answered_by_the_client(world: Path) -> None:
    inner_store = world / "inner.db"
    p = provider(agent_command(write_script(world, "note", WRITE_NOTE), inner_store))
    outer = SQLiteStore(world / "outer.db")
    session = await p.open(workspace=world / "ws", store=outer, approval=YesApproval(yes=True))
    pgid = session.state["acp_agent"].rpc.process.pgid
    try:
        events = [e async for e in session.send("write a note")]
    finally:
        await p.close(session)
    assert group_members(pgid) == [] and running_agents() == []
    final = events[-1]
    assert isinstance(final, Complete) and final.outcome == "completed" and final.stop_reason == "end_turn"
    # The text before and after the tool call are separate blocks; the turn's answer is the last.
    assert [e.text for e in events if isinstance(e, Text)] == ["Writing it.", "Done."]
    assert final.text == "Done."
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Writing it.", "Done."]
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.call_id, c.arguments) for c in calls] == [("call-w", {"path": "note.txt", "content": "hi\n"})]
    # The inner agent asked its client (the outer provider), whose approval said yes.
    asked = [e for e in events if isinstance(e, PermissionRequest)]
    assert [a.call_id for a in asked] == ["call-w"]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(r.call_id, r.is_error) for r in results] == [("call-w", False)]
    assert (world / "ws" / "note.txt").read_text() == "hi\n"
    # The inner agent's cost reached the outer session through usage_update.
    usage = [e for e in events if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].cost_usd == pytest.approx(0.003) and usage[0].priced
    assert usage[0].input_tokens == 30 and usage[0].output_tokens == 7
    # Both sides stored the session; the inner id is the outer's provider session id.
    inner = SQLiteStore(inner_store)
    record = outer.require(session.session_id)
    assert record.provider_session_id is not None
    inner_record = inner.require(record.provider_session_id)
    assert inner_record.status == "completed" and inner_record.metadata["title"] == "write a note"
    assert [e.kind for e in inner.transcript(inner_record.id)][:2] == ["user", "assistant"]
    inner.close()
    outer.close()


@run_async
async def test_a_refused_permission_fails_the_tool_and_writes_nothing(world: Path) -> None:
    p = provider(agent_command(write_script(world, "note", WRITE_NOTE), world / "inner.db"))
    session = await p.open(workspace=world / "ws", approval=YesApproval(yes=False))
    try:
        events = [e async for e in session.send("write a note")]
    finally:
        await p.close(session)
    results = [e for e in events if isinstance(e, ToolResult)]
    assert len(results) == 1 and results[0].is_error and "permission denied" in results[0].output
    assert not (world / "ws" / "note.txt").exists()
    assert isinstance(events[-1], Complete) and events[-1].outcome == "completed"


@run_async
async def test_cancel_ends_the_turn_cancelled(world: Path) -> None:
    # The provider would give up on its own only after 60 s: the agent's answer ends it.
    p = provider(agent_command(write_script(world, "slow", SLOW), world / "inner.db"), cancel_timeout="60")
    session = await p.open(workspace=world / "ws")
    pgid = session.state["acp_agent"].rpc.process.pgid
    try:
        stream = session.send("wait")
        async for event in stream:
            if isinstance(event, ToolCall):
                break  # the turn is running on the agent
        await p.abort(session)
        rest = [e async for e in stream]
    finally:
        await p.close(session)
    assert group_members(pgid) == []
    final = rest[-1]
    assert isinstance(final, Complete) and final.outcome == "aborted" and final.stop_reason == "cancelled"


@run_async
async def test_a_stored_session_is_loaded_and_continued(world: Path) -> None:
    inner_store = world / "inner.db"
    script = [*WRITE_NOTE, {"text": "Still here."}]
    command = agent_command(write_script(world, "two", script), inner_store)
    outer = SQLiteStore(world / "outer.db")
    p = provider(command)
    session = await p.open(workspace=world / "ws", store=outer, approval=YesApproval(yes=True))
    try:
        [e async for e in session.send("write a note")]
    finally:
        await p.close(session)
    # A new agent process: the outer provider resumes with session/load on the inner store.
    p2 = provider(command)
    resumed = await p2.resume(session.session_id, store=outer, approval=YesApproval(yes=True))
    try:
        assert resumed.resumed == "native"
        assert resumed.state["acp_agent"].can_load
        events = [e async for e in resumed.send("are you there?")]
    finally:
        await p2.close(resumed)
    # The inner agent plays its script from the start in a new process; the session is the same.
    final = events[-1]
    assert isinstance(final, Complete) and final.outcome == "completed"
    inner = SQLiteStore(inner_store)
    record = outer.require(session.session_id)
    transcript = inner.transcript(str(record.provider_session_id))
    assert [e.content for e in transcript if e.kind == "user"] == ["write a note", "are you there?"]
    assert len(inner.list_sessions()) == 1
    inner.close()
    outer.close()


@run_async
async def test_a_failing_provider_is_a_json_rpc_error_classified_on_the_other_side(world: Path) -> None:
    inner_store = world / "inner.db"
    p = provider(agent_command(write_script(world, "fail", FAILING), inner_store))
    session = await p.open(workspace=world / "ws")
    try:
        events = [e async for e in session.send("go")]
    finally:
        await p.close(session)
    errors = [e for e in events if isinstance(e, Error)]
    assert [e.kind for e in errors] == ["quota"] and "slow down" in errors[0].message
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed"
    # Nothing recorded was lost on the agent's side: the failure is in its store.
    inner = SQLiteStore(inner_store)
    (record,) = inner.list_sessions()
    assert record.status == "failed"
    kinds = [json.loads(r.payload).get("kind") for r in inner.raw_rows(record.id) if r.source == "event"]
    assert "quota" in kinds
    inner.close()


def test_seamline_run_drives_seamline_acp(world: Path, cli_env: dict[str, str]) -> None:
    """The acceptance line: `seamline run --provider acp -o command="seamline acp …"`."""
    env = {**cli_env, "PYTHONPATH": str(ROOT / "src")}
    env.pop("SEAMLINE_BLOCK_REAL_PROVIDERS", None)
    command = agent_command(write_script(world, "note", WRITE_NOTE), world / "inner.db")
    argv = [sys.executable, "-m", "seamline", "run", "--provider", "acp", "-o", f"command={command}"]
    argv += ["--json", "--yes", "--workspace", str(world / "ws"), "write a note"]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed"
    types = [e["type"] for e in events]
    assert {"tool_call", "permission_request", "permission_decision", "tool_result", "usage"} <= set(types)
    assert (world / "ws" / "note.txt").read_text() == "hi\n"
    assert group_members(proc.pid) == []
