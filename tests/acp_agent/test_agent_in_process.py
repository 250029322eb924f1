"""The agent's methods in process, on a provider that hangs after its first words: a
cancel the provider does not honour, a busy session, and shutting down."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from seamline.acp_agent.agent import AcpAgentSettings, SeamlineAcpAgent
from seamline.events import Event, TextDelta
from seamline.loop.messages import ModelRequest
from seamline.providers import registry
from seamline.providers.base import Provider
from seamline.runner import RunOptions
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.transport.jsonrpc import JsonRpcError
from tests.providers.agent_cli_support import run_async


class HangingProvider(Provider):
    """Says "start", then waits for ever: the abort's interrupt of the wait is swallowed, as
    by a provider stuck in a call that cannot be cancelled."""

    name = "acp-test-hanging"
    real = False

    def _step(self, request: ModelRequest) -> AsyncIterator[Event]:
        return self._hang()

    async def _hang(self) -> AsyncIterator[Event]:
        yield TextDelta(text="start")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.Event().wait()  # the abort does not reach it; only the grace's outright cancel


class FakeConnection:
    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.spoke = asyncio.Event()

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        self.updates.append(params["update"])
        self.spoke.set()

    async def request(self, method: str, params: Any, *, timeout: float | None = None) -> Any:
        return {"outcome": {"outcome": "cancelled"}}


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SeamlineAcpAgent]:
    monkeypatch.setitem(registry._extra, HangingProvider.name, HangingProvider)
    store = SQLiteStore(tmp_path / "s.db")
    a = SeamlineAcpAgent(AcpAgentSettings(RunOptions(provider=HangingProvider.name, store=store), cancel_grace=0.2))
    a.connection = FakeConnection()  # type: ignore[assignment]
    yield a
    store.close()


async def start_turn(agent: SeamlineAcpAgent, cwd: Path) -> tuple[str, asyncio.Task[Any]]:
    sid = (await agent.handle("session/new", {"cwd": str(cwd), "mcpServers": []}))["sessionId"]
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}
    task = asyncio.ensure_future(agent.handle("session/prompt", prompt))
    connection = agent.connection
    assert isinstance(connection, FakeConnection)
    await asyncio.wait_for(connection.spoke.wait(), timeout=30)  # "start": the turn is running
    return sid, task


@run_async
async def test_a_cancel_the_provider_ignores_is_enforced_after_the_grace(
    agent: SeamlineAcpAgent, tmp_path: Path
) -> None:
    sid, turn = await start_turn(agent, tmp_path)
    with pytest.raises(JsonRpcError) as busy:
        await agent.handle("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "again"}]})
    assert busy.value.code == -32600
    await agent.notified("session/cancel", {"sessionId": sid})
    result = await asyncio.wait_for(turn, timeout=30)
    assert result == {
        "stopReason": "cancelled",
        "_meta": {"seamline": {"outcome": "aborted", "stopReason": "cancelled"}},
    }
    assert agent.settings.store is not None and agent.settings.store.require(sid).status == "aborted"
    await agent.close_all()


@run_async
async def test_shutting_down_cancels_the_running_turn_and_refuses_new_ones(
    agent: SeamlineAcpAgent, tmp_path: Path
) -> None:
    sid, turn = await start_turn(agent, tmp_path)
    await agent.shut_down()
    assert (await asyncio.wait_for(turn, timeout=30))["stopReason"] == "cancelled"
    with pytest.raises(JsonRpcError) as stopping:
        await agent.handle("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "more"}]})
    assert stopping.value.code == -32600
    await agent.close_all()
    assert agent.sessions == {}
    with pytest.raises(JsonRpcError) as gone:
        await agent.handle("session/set_mode", {"sessionId": sid, "modeId": "agent"})
    assert gone.value.code == -32002 and "load or resume it first" in gone.value.rpc_message
