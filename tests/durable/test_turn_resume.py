"""A role turn started again (its worker killed, its activity timed out) continues the
session the first start opened: natively with the provider session id kept in the
store (agent CLIs, ACP), from the store's transcript otherwise (model APIs)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest

from seamline.durable import RunLedger, RunSpec, advance, run_turn
from seamline.durable.steps import turn_session_id
from seamline.events import Complete, Event, Session, Text
from seamline.providers import registry
from seamline.providers.base import Provider, ProviderSession
from seamline.sessions.sqlite_store import open_store
from tests.durable.conftest import opened_ledger
from tests.durable.pipelines import fan_out_pipeline


class NativeResumeAgent(Provider):
    """An out-of-process agent in miniature: it mints its own session id and resumes by it."""

    name: ClassVar[str] = "native-resume-agent"
    runs_own_tools = True
    resume_support = "native"
    session_ids = "provider"
    real = False
    resumed_with: ClassVar[list[str | None]] = []
    turns: ClassVar[list[str | None]] = []

    async def _resume(self, session: ProviderSession) -> None:
        NativeResumeAgent.resumed_with.append(session.provider_session_id)

    async def _turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        NativeResumeAgent.turns.append(session.provider_session_id)
        native = session.provider_session_id or "agent-thread-7"
        yield Session(session_id=session.session_id, provider=self.name, model=None, provider_session_id=native)
        yield Text(text="still here")
        yield Complete(outcome="completed", stop_reason="end_turn", text="continued")


@pytest.fixture
def native_agent() -> Iterator[type[NativeResumeAgent]]:
    NativeResumeAgent.resumed_with, NativeResumeAgent.turns = [], []
    registry.register(NativeResumeAgent)
    try:
        yield NativeResumeAgent
    finally:
        registry._extra.pop(NativeResumeAgent.name, None)


class WorkerKilled(Exception):
    """Stands for a worker killed mid-turn: the start ends without finishing the turn."""


def _killed_after(events: int) -> Any:
    seen = [0]

    def heartbeat() -> None:
        seen[0] += 1
        if seen[0] >= events:
            raise WorkerKilled

    return heartbeat


def _start(tmp: Path, definition: dict[str, Any], run_id: str) -> tuple[Path, str]:
    store = tmp / "s.db"
    spec = RunSpec(run_id=run_id, definition=definition, task="go", store=str(store), workspace=str(tmp))
    kept = open_store(store)
    try:
        RunLedger(kept).register(run_id, msgspec.to_builtins(spec))
    finally:
        kept.close()
    step = asyncio.run(advance(str(store), run_id))
    assert step["done"] is False
    return store, step["needed"][0]


def _session_events(store: Path, run_id: str) -> list[dict[str, Any]]:
    with opened_ledger(store) as ledger:
        return [json.loads(e) for _, _, e in ledger.events_after(run_id, 0) if b'"type":"session"' in e]


def test_a_retried_agent_turn_resumes_natively_with_the_stored_provider_session_id(
    tmp_path: Path, native_agent: type[NativeResumeAgent]
) -> None:
    definition = {
        "name": "one-agent",
        "phases": [{"name": "work", "role": "agent", "next": "done"}],
        "transitions": {"work": ["done"]},
        "roles": {"agent": {"kind": "agent", "provider": native_agent.name}},
    }
    store, key = _start(tmp_path, definition, "rn")
    # The first start dies once the agent has told its session id (our session event, then its own).
    with pytest.raises(WorkerKilled):
        asyncio.run(run_turn(str(store), "rn", key, heartbeat=_killed_after(2)))
    summary = asyncio.run(run_turn(str(store), "rn", key))
    assert (summary["outcome"], summary["reused"]) == ("completed", False)
    # The second start resumed the agent's own session instead of opening a fresh one.
    assert native_agent.resumed_with == ["agent-thread-7"]
    assert native_agent.turns == [None, "agent-thread-7"]
    sid = turn_session_id("rn", key)
    kept = open_store(store)
    try:
        record = kept.require(sid)
        assert record.provider_session_id == "agent-thread-7"
        assert record.metadata["last_resume"] == "native"
        assert [r.id for r in kept.list_sessions()] == [sid]  # one session for the turn, not two
    finally:
        kept.close()
    seen = _session_events(store, "rn")
    assert {e["session_id"] for e in seen} == {sid}
    assert seen[-1]["provider_session_id"] == "agent-thread-7"  # the retried start names it at once


def test_a_retried_model_api_turn_resumes_from_the_store(tmp_path: Path) -> None:
    data = msgspec.json.decode(fan_out_pipeline(tmp_path, ["a"]).read_bytes())
    store, key = _start(tmp_path, data, "rm")
    with pytest.raises(WorkerKilled):
        asyncio.run(run_turn(str(store), "rm", key, heartbeat=_killed_after(1)))
    summary = asyncio.run(run_turn(str(store), "rm", key))
    assert (summary["outcome"], summary["reused"]) == ("completed", False)
    sid = turn_session_id("rm", key)
    kept = open_store(store)
    try:
        record = kept.require(sid)
        assert record.metadata["last_resume"] == "emulated"  # the transcript is the session's memory
        assert [r.id for r in kept.list_sessions()] == [sid]
        assert {r.turn for r in kept.raw_rows(sid)} == {1, 2}  # the second start is the same session's next turn
    finally:
        kept.close()
    assert {e["session_id"] for e in _session_events(store, "rm")} == {sid}
    with opened_ledger(store) as ledger:
        assert ledger.turns("rm")[key]["starts"] == 2


@pytest.mark.real
def test_a_retried_claude_code_turn_resumes_the_cli_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.providers.agent_cli_support import AgentAnthropic, cli_path, make_world

    world = make_world(tmp_path, monkeypatch)
    script = [{"text": "First answer."}, {"text": "Second answer."}]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        options = {"executable": cli_path("claude"), "base_url": fake.root_url, "max_retries": "0"}
        definition = {
            "name": "one-cli",
            "phases": [{"name": "work", "role": "coder", "next": "done"}],
            "transitions": {"work": ["done"]},
            "roles": {"coder": {"kind": "agent", "provider": "claude-code", "model": "claude-sonnet-4-5",
                                "options": options}},
        }  # fmt: skip
        store = world.workspace.parent / "s.db"
        spec = RunSpec(run_id="rc", definition=definition, task="Remember zeppelin.", store=str(store),
                       workspace=str(world.workspace))  # fmt: skip
        kept = open_store(store)
        try:
            RunLedger(kept).register("rc", msgspec.to_builtins(spec))
        finally:
            kept.close()
        key = asyncio.run(advance(str(store), "rc"))["needed"][0]

        # The CLI answers in full, then the worker dies before the turn is recorded as finished.
        def killed(self: RunLedger, *args: Any, **kwargs: Any) -> bool:
            raise WorkerKilled

        with monkeypatch.context() as patch:
            patch.setattr(RunLedger, "finish", killed)
            with pytest.raises(WorkerKilled):
                asyncio.run(run_turn(str(store), "rc", key))
        summary = asyncio.run(run_turn(str(store), "rc", key))
        requests = fake.turn_requests()
    assert (summary["outcome"], summary["reused"]) == ("completed", False)
    assert len(requests) == 2
    # The second start continued the CLI's own conversation: the first exchange went with it.
    last = json.dumps(requests[-1].body["messages"])
    assert "First answer." in last
    kept = open_store(store)
    try:
        record = kept.require(turn_session_id("rc", key))
        assert record.metadata["last_resume"] == "native" and record.provider_session_id
    finally:
        kept.close()
