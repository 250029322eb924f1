"""``serve --on temporal``'s hub without Temporal: two servers' hubs over one PostgreSQL
store read a durable run that a third connection (a worker's) writes. Each hub's streams
are woken through its one LISTEN connection; the event numbers are the same on both, so a
reader moves from one to the other with ``after`` and reads each event once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from seamline.durable.ledger import RUN_EVENTS, RunLedger
from seamline.errors import InvalidRequest
from seamline.events import Complete, Event, Text
from seamline.server.remote_runs import DurableTarget, RemoteRunHub
from seamline.sessions.sqlite_store import open_store
from tests.sessions.conftest import fresh_database, postgres_url

__all__ = ["postgres_url"]

pytestmark = pytest.mark.real


@pytest.fixture
def pg_store(postgres_url: str) -> str:
    pytest.importorskip("psycopg")
    return fresh_database(postgres_url)


def _hub(location: str, tmp_path: Path) -> RemoteRunHub:
    # No fallback look within the test's bound: only a notification wakes a stream.
    target = DurableTarget(temporal="127.0.0.1:1", task_queue="q", store=location, fallback_s=600.0)
    return RemoteRunHub(open_store(location), workspace=tmp_path, durable=target)


def test_two_hubs_stream_one_run_and_a_reader_moves_between_them(pg_store: str, tmp_path: Path) -> None:
    async def scenario() -> tuple[list[tuple[int, str]], list[tuple[int, str]], dict[str, object]]:
        worker = open_store(pg_store)
        ledger = RunLedger(worker)
        ledger.register("r" * 32, {"task": "hi", "definition": {"name": "single", "phases": [{"name": "answer"}]}})
        first, second = _hub(pg_store, tmp_path), _hub(pg_store, tmp_path)
        try:
            seen_first: list[tuple[int, str]] = []
            seen_second: list[tuple[int, str]] = []

            async def read(hub: RemoteRunHub, after: int, into: list[tuple[int, str]], most: int) -> None:
                async for start, batch in hub.require_run("r" * 32).follow(after):
                    for n, event in enumerate(batch, start + 1):
                        into.append((n, _shown(event)))
                        if len(into) == most:
                            return

            reading = asyncio.create_task(read(first, 0, seen_first, 2))
            await _waiting(first)  # the stream waits for a notification before the worker writes
            ledger.publish("r" * 32, "answer/agent/1/1", 1, Text(text="one"))
            ledger.publish("r" * 32, "answer/agent/1/1", 1, Text(text="two"))
            await asyncio.wait_for(reading, timeout=120)
            # The reader moves to the other server after event 2; the run goes on there.
            reading = asyncio.create_task(read(second, seen_first[-1][0], seen_second, 10))
            await _waiting(second)
            ledger.publish("r" * 32, "answer/agent/1/1", 1, Text(text="three"))
            ledger.publish("r" * 32, RUN_EVENTS, 0, Complete(outcome="completed", stop_reason="end_turn", text="x"))
            await asyncio.wait_for(reading, timeout=120)
            summary = second.require_run("r" * 32).summary()
            worker.close()
            return seen_first, seen_second, summary
        finally:
            for hub in (first, second):
                await hub.close()
                hub.store.close()

    seen_first, seen_second, summary = asyncio.run(scenario())
    assert seen_first == [(1, "one"), (2, "two")]
    assert seen_second == [(3, "three"), (4, "complete")]
    assert summary["on"] == "temporal" and summary["events"] == 4 and summary["status"] == "running"


def test_session_runs_are_refused_on_temporal(tmp_path: Path) -> None:
    hub = _hub(str(tmp_path / "store.db"), tmp_path)

    async def scenario() -> None:
        try:
            await hub.start_run("s", "hi")
        finally:
            await hub.close()
            hub.store.close()

    with pytest.raises(InvalidRequest, match="pipelines/single/runs"):
        asyncio.run(scenario())


async def _waiting(hub: RemoteRunHub) -> None:
    """Until the stream waits and the hub listens: from then on only a notification wakes it."""
    while "r" * 32 not in hub.fanout._waiters:  # a condition polled, not a pause
        await asyncio.sleep(0.01)
    await asyncio.wait_for(hub.fanout.listening.wait(), timeout=60)
    await asyncio.sleep(0)  # the stream has read what the wake-up on listening let it read


def _shown(event: Event) -> str:
    return event.text if isinstance(event, Text) else event.type
