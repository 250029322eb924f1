"""The official ``agent-client-protocol`` Python SDK as the client of ``seamline acp``.

The SDK validates every message against the ACP schema with its own models, so an update
or a result seamline shapes wrongly fails here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

acp = pytest.importorskip("acp")
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block  # noqa: E402
from acp.schema import (  # noqa: E402
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    CurrentModeUpdate,
    DeniedOutcome,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    UsageUpdate,
    UserMessageChunk,
)

from seamline.sessions.sqlite_store import SQLiteStore  # noqa: E402
from tests.acp_agent.support import FAILING, SLOW, WRITE_NOTE, agent_argv, agent_env, write_script  # noqa: E402
from tests.providers.agent_cli_support import run_async  # noqa: E402


class RecordingClient:
    """An ACP client that records updates and answers permission requests as told."""

    def __init__(self, answer: str | None = "allow_once") -> None:
        self.answer = answer  # None: keep the question open until cancelled
        self.updates: list[Any] = []
        self.asked: list[Any] = []
        self.question = asyncio.Event()
        self.tool_started = asyncio.Event()

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> RequestPermissionResponse:
        self.asked.append((tool_call, [o.kind for o in options]))
        self.question.set()
        if self.answer is None:
            await asyncio.Event().wait()  # answered only by the agent withdrawing it
        if self.answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=str(self.answer)))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        if isinstance(update, ToolCallStart):
            self.tool_started.set()

    def of(self, kind: type) -> list[Any]:
        return [u for u in self.updates if isinstance(u, kind)]


@contextlib.asynccontextmanager
async def connected(client: RecordingClient, argv: list[str], home: Path) -> AsyncIterator[Any]:
    async with spawn_agent_process(client, argv[0], *argv[1:], env=agent_env(home)) as (conn, process):
        try:
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            yield conn
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
                await process.wait()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    return tmp_path / "ws"


@run_async
async def test_initialize_advertises_load_list_resume_and_close(tmp_path: Path, ws: Path) -> None:
    argv = agent_argv(write_script(tmp_path, "note", WRITE_NOTE), tmp_path / "s.db")
    async with spawn_agent_process(RecordingClient(), argv[0], *argv[1:], env=agent_env(tmp_path)) as (conn, _):
        init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert init.protocol_version == 1 and init.agent_info is not None and init.agent_info.name == "seamline"
        caps = init.agent_capabilities
        assert caps is not None and caps.load_session
        assert caps.session_capabilities is not None
        assert caps.session_capabilities.list is not None and caps.session_capabilities.resume is not None
        new = await conn.new_session(cwd=str(ws), mcp_servers=[])
        assert new.modes is not None and new.modes.current_mode_id == "agent"
        assert {m.id for m in new.modes.available_modes} == {"agent", "planning"}


@run_async
async def test_tool_call_turn_with_the_permission_allowed_by_the_client(tmp_path: Path, ws: Path) -> None:
    store = tmp_path / "s.db"
    client = RecordingClient("allow_once")
    async with connected(client, agent_argv(write_script(tmp_path, "note", WRITE_NOTE), store), tmp_path) as conn:
        session = await conn.new_session(cwd=str(ws), mcp_servers=[])
        result = await conn.prompt(session_id=session.session_id, prompt=[text_block("write a note")])
    assert result.stop_reason == "end_turn"
    assert result.usage is not None and result.usage.input_tokens == 30 and result.usage.output_tokens == 7
    assert "".join(u.content.text for u in client.of(AgentMessageChunk)) == "Writing it.Done."
    (start,) = client.of(ToolCallStart)
    assert start.tool_call_id == "call-w" and start.kind == "edit" and start.status == "pending"
    assert start.raw_input == {"path": "note.txt", "content": "hi\n"}
    (asked,) = client.asked
    assert asked[0].tool_call_id == "call-w"
    assert asked[1] == ["allow_once", "allow_always", "reject_once", "reject_always"]
    progress = client.of(ToolCallProgress)
    assert [str(loc.path) for u in progress if u.locations for loc in u.locations] == [str(ws / "note.txt")]
    assert progress[-1].status == "completed"
    costs = [u.cost.amount for u in client.of(UsageUpdate) if u.cost is not None]
    assert costs == pytest.approx([0.001, 0.003])  # the session's cost so far
    assert (ws / "note.txt").read_text() == "hi\n"


@run_async
async def test_reject_always_is_stored_as_a_rule_and_holds_next_time(tmp_path: Path, ws: Path) -> None:
    store = tmp_path / "s.db"
    script = write_script(tmp_path, "twice", [*WRITE_NOTE, *WRITE_NOTE])
    client = RecordingClient("reject_always")
    async with connected(client, agent_argv(script, store), tmp_path) as conn:
        session = await conn.new_session(cwd=str(ws), mcp_servers=[])
        first = await conn.prompt(session_id=session.session_id, prompt=[text_block("write")])
        second = await conn.prompt(session_id=session.session_id, prompt=[text_block("write again")])
    assert first.stop_reason == second.stop_reason == "end_turn"
    assert len(client.asked) == 1  # the stored deny rule answered the second time
    failed = [u for u in client.of(ToolCallProgress) if u.status == "failed"]
    assert len(failed) == 2 and not (ws / "note.txt").exists()


@run_async
async def test_cancel_while_a_permission_is_pending(tmp_path: Path, ws: Path) -> None:
    client = RecordingClient(None)
    argv = agent_argv(write_script(tmp_path, "note", WRITE_NOTE), tmp_path / "s.db")
    async with connected(client, argv, tmp_path) as conn:
        session = await conn.new_session(cwd=str(ws), mcp_servers=[])
        turn = asyncio.ensure_future(conn.prompt(session_id=session.session_id, prompt=[text_block("write")]))
        await asyncio.wait_for(client.question.wait(), timeout=60)
        await conn.cancel(session_id=session.session_id)
        result = await asyncio.wait_for(turn, timeout=60)
    assert result.stop_reason == "cancelled"
    assert not (ws / "note.txt").exists()
    records = SQLiteStore(tmp_path / "s.db")
    assert records.require(session.session_id).status == "aborted"
    records.close()


@run_async
async def test_cancel_of_a_provider_that_does_not_settle(tmp_path: Path, ws: Path) -> None:
    client = RecordingClient()
    async with connected(client, agent_argv(write_script(tmp_path, "slow", SLOW), tmp_path / "s.db"), tmp_path) as conn:
        session = await conn.new_session(cwd=str(ws), mcp_servers=[])
        turn = asyncio.ensure_future(conn.prompt(session_id=session.session_id, prompt=[text_block("wait")]))
        await asyncio.wait_for(client.tool_started.wait(), timeout=60)  # the turn is running
        await conn.cancel(session_id=session.session_id)
        result = await asyncio.wait_for(turn, timeout=60)
    # Settled by the abort (between model calls) or stopped outright (during the slow one).
    assert result.stop_reason == "cancelled"
    assert result.field_meta is not None and result.field_meta["seamline"]["outcome"] == "aborted"
    records = SQLiteStore(tmp_path / "s.db")
    assert records.require(session.session_id).status == "aborted"
    records.close()


@run_async
async def test_load_replays_a_stored_session_and_list_finds_it(tmp_path: Path, ws: Path) -> None:
    store = tmp_path / "s.db"
    thinking = {**WRITE_NOTE[0], "reasoning": "A note, then."}
    script = write_script(tmp_path, "more", [thinking, *WRITE_NOTE[1:], {"text": "Again."}])
    argv = agent_argv(script, store)
    live = RecordingClient()
    async with connected(live, argv, tmp_path) as conn:
        session = await conn.new_session(cwd=str(ws), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[text_block("write a note")])
    client = RecordingClient()
    async with connected(client, argv, tmp_path) as conn:  # a new agent process
        listed = await conn.list_sessions(cwd=str(ws))
        assert [(s.session_id, s.title) for s in listed.sessions] == [(session.session_id, "write a note")]
        await conn.load_session(cwd=str(ws), session_id=session.session_id, mcp_servers=[])
        replayed = list(client.updates)
        again = await conn.prompt(session_id=session.session_id, prompt=[text_block("once more")])
    assert [u.content.text for u in replayed if isinstance(u, UserMessageChunk)] == ["write a note"]
    assert "Writing it." in [u.content.text for u in replayed if isinstance(u, AgentMessageChunk)]
    assert [u.tool_call_id for u in replayed if isinstance(u, ToolCallStart)] == ["call-w"]
    # Reasoning is replayed, and a tool call has the kind it had live (write_file: edit).
    assert [u.content.text for u in replayed if isinstance(u, AgentThoughtChunk)] == ["A note, then."]
    assert [u.kind for u in replayed if isinstance(u, ToolCallStart)] == ["edit"]
    assert [u.kind for u in live.of(ToolCallStart)] == ["edit"]
    located = [u for u in replayed if isinstance(u, ToolCallProgress) and u.locations]
    assert [str(loc.path) for u in located for loc in u.locations or []] == [str(ws / "note.txt")]
    assert again.stop_reason == "end_turn"


@run_async
async def test_set_mode_planning_refuses_writing_tools_and_set_model_is_kept(tmp_path: Path, ws: Path) -> None:
    store = tmp_path / "s.db"
    client = RecordingClient("allow_once")
    async with connected(client, agent_argv(write_script(tmp_path, "note", WRITE_NOTE), store), tmp_path) as conn:
        session = await conn.new_session(cwd=str(ws), mcp_servers=[])
        await conn.set_session_mode(session_id=session.session_id, mode_id="planning")
        result = await conn.prompt(session_id=session.session_id, prompt=[text_block("write")])
        with pytest.raises(RequestError) as bad_mode:
            await conn.set_session_mode(session_id=session.session_id, mode_id="yolo")
        # session/set_model is outside this SDK's schema; send it as the raw method.
        assert (
            await conn._conn.send_request("session/set_model", {"sessionId": session.session_id, "modelId": "m2"}) == {}
        )
    assert bad_mode.value.code == -32602
    assert result.stop_reason == "end_turn" and client.asked == []
    assert [u.current_mode_id for u in client.of(CurrentModeUpdate)] == ["planning"]
    assert [u.status for u in client.of(ToolCallProgress) if u.status] == ["failed"]
    assert not (ws / "note.txt").exists()
    records = SQLiteStore(store)
    metadata = records.require(session.session_id).metadata
    assert metadata["mode"] == "planning" and metadata["model"] == "m2"
    records.close()


@run_async
async def test_failures_are_json_rpc_errors(tmp_path: Path, ws: Path) -> None:
    store = tmp_path / "s.db"
    async with connected(
        RecordingClient(), agent_argv(write_script(tmp_path, "fail", FAILING), store), tmp_path
    ) as conn:
        session = await conn.new_session(cwd=str(ws), mcp_servers=[])
        with pytest.raises(RequestError) as failed:
            await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        with pytest.raises(RequestError) as unknown:
            await conn.prompt(session_id="no-such-session", prompt=[text_block("go")])
        with pytest.raises(RequestError) as not_stored:
            await conn.load_session(cwd=str(ws), session_id="no-such-session", mcp_servers=[])
        with pytest.raises(RequestError) as bad_cwd:
            await conn.new_session(cwd=str(ws / "missing"), mcp_servers=[])
    assert failed.value.code == -32603
    assert failed.value.data is not None and failed.value.data["kind"] == "quota"
    assert "slow down" in failed.value.data["message"]
    assert unknown.value.code == -32002 and not_stored.value.code == -32002
    assert bad_cwd.value.code == -32602
    records = SQLiteStore(store)
    assert records.require(session.session_id).status == "failed"
    records.close()


@run_async
async def test_a_pipeline_prompt_shows_its_phases_as_the_plan(tmp_path: Path) -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    argv = [*agent_argv(write_script(tmp_path, "unused", []), tmp_path / "s.db")[:4], "--pipeline", "answer-review"]
    argv += ["--store", str(tmp_path / "s.db")]
    client = RecordingClient()
    async with connected(client, argv, tmp_path) as conn:
        session = await conn.new_session(cwd=str(docs), mcp_servers=[])
        result = await conn.prompt(session_id=session.session_id, prompt=[text_block("How do I add a provider?")])
    assert result.stop_reason == "end_turn"
    assert result.field_meta is not None and result.field_meta["seamline"]["stopReason"] == "converged"
    plans = [[(e.content.split(" ")[0], e.status) for e in u.entries] for u in client.of(AgentPlanUpdate)]
    assert plans[0] == [("write", "in_progress"), ("review", "pending")]
    assert plans[1] == [("write", "completed"), ("review", "in_progress")]
    assert plans[-1] == [("write", "completed"), ("review", "completed")]
    answer = "".join(u.content.text for u in client.of(AgentMessageChunk))
    assert answer and "provider" in answer.lower()
    assert client.of(AgentThoughtChunk)  # the writer's own words are the work, not the answer
    run_id = result.field_meta["seamline"]["runId"]
    assert (tmp_path / "traces" / f"{run_id}.jsonl").exists()


@run_async
async def test_the_budget_and_the_step_limit_end_the_turn_with_their_stop_reasons(tmp_path: Path, ws: Path) -> None:
    pricey = write_script(tmp_path, "pricey", [{"text": "costly", "usage": {"input_tokens": 1, "cost_usd": 0.01}}])
    async with connected(
        RecordingClient(), agent_argv(pricey, tmp_path / "s.db", "--budget-usd", "0.001"), tmp_path
    ) as conn:
        session = await conn.new_session(cwd=str(ws), mcp_servers=[])
        budget = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    assert budget.stop_reason == "cancelled"
    assert budget.field_meta == {"seamline": {"outcome": "budget", "stopReason": "budget"}}
    note = write_script(tmp_path, "note", WRITE_NOTE)
    async with connected(RecordingClient(), agent_argv(note, tmp_path / "s.db", "--max-steps", "1"), tmp_path) as conn:
        session = await conn.new_session(cwd=str(ws), mcp_servers=[])
        steps = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    assert steps.stop_reason == "max_turn_requests"


@run_async
async def test_a_session_made_by_seamline_run_is_loaded_on_its_own_provider(tmp_path: Path) -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    store = tmp_path / "s.db"
    env = {**agent_env(tmp_path), "SEAMLINE_BLOCK_REAL_PROVIDERS": "1"}
    run = await asyncio.create_subprocess_exec(
        *agent_argv(write_script(tmp_path, "unused", []), store)[:3],
        "run",
        "--json",
        "--store",
        str(store),
        "--workspace",
        str(docs),
        "What does the store keep?",
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        out, _ = await asyncio.wait_for(run.communicate(), timeout=120)
    finally:
        if run.returncode is None:
            run.kill()
            await run.wait()
    assert run.returncode == 0
    session_id = json.loads(out.splitlines()[0])["session_id"]
    client = RecordingClient()
    async with connected(client, agent_argv(write_script(tmp_path, "unused", []), store), tmp_path) as conn:
        loaded = await conn.load_session(cwd=str(docs), session_id=session_id, mcp_servers=[])
        replayed = len(client.updates)
        again = await conn.prompt(session_id=session_id, prompt=[text_block("And the raw log?")])
    assert loaded.modes is not None and loaded.modes.current_mode_id == "agent"
    assert [u.content.text for u in client.updates[:replayed] if isinstance(u, UserMessageChunk)] == [
        "What does the store keep?"
    ]
    assert again.stop_reason == "end_turn"
    assert any(isinstance(u, AgentMessageChunk) for u in client.updates[replayed:])  # the offline provider answered
    records = SQLiteStore(store)
    record = records.require(session_id)
    assert record.provider == "offline" and record.status == "completed"
    assert [e.content for e in records.transcript(session_id) if e.kind == "user"] == [
        "What does the store keep?",
        "And the raw log?",
    ]
    records.close()
