"""The ``a2a`` provider against an A2A agent built with the official SDK (a2a-sdk 1.3.0,
served by uvicorn on 127.0.0.1): turns, streaming, the context kept across turns and across
a resume from the store, an agent's question answered in the next turn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from seamline.events import Complete, Event, Session, Text, TextDelta
from seamline.providers.a2a.provider import A2AProvider
from seamline.providers.base import Provider, ProviderSession
from seamline.providers.registry import create_provider, provider_names
from seamline.sessions.sqlite_store import SQLiteStore
from tests.providers.a2a_agent_support import A2AAgentServer, a2a_agent, texts
from tests.providers.agent_cli_support import run_async

pytestmark = pytest.mark.usefixtures("a2a_real_allowed")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "store.db")
    yield opened
    opened.close()


def a2a(server: A2AAgentServer, **options: str) -> Provider:
    return create_provider("a2a", options={"url": server.url, **options})


async def turns(session: ProviderSession, *prompts: str) -> list[list[Event]]:
    """Each prompt's events, one turn after the other; the session is closed after them."""
    try:
        return [[e async for e in session.send(prompt)] for prompt in prompts]
    finally:
        await session.provider.close(session)


def ending(events: list[Event]) -> Complete:
    ends = [e for e in events if isinstance(e, Complete)]
    assert len(ends) == 1 and events[-1] is ends[0]
    return ends[0]


def test_a2a_is_a_registered_provider() -> None:
    assert "a2a" in provider_names()
    provider = create_provider("a2a", options={"url": "http://127.0.0.1:1"})
    assert isinstance(provider, A2AProvider)
    assert provider.capabilities().session_ids == "provider" and provider.capabilities().resume == "native"


@run_async
async def test_two_turns_keep_the_agents_context_and_its_id_is_the_provider_session_id(
    a2a_server: A2AAgentServer, store: SQLiteStore
) -> None:
    session = await a2a(a2a_server).open(store=store)
    first, second = await turns(session, "the password is swordfish", "what was it?")
    assert ending(first).outcome == "completed"
    # Turn 2 is answered with what only turn 1 told the agent: the same context.
    assert ending(second).text == "heard: what was it? | before: the password is swordfish"
    (ctx1, _task1, _), (ctx2, _task2, _) = a2a_server.log.turns
    assert ctx1 == ctx2
    assert session.provider_session_id == ctx1
    assert store.require(session.session_id).provider_session_id == ctx1
    captured = [e for e in first if isinstance(e, Session) and e.provider_session_id]
    assert captured and captured[-1].provider_session_id == ctx1


@run_async
async def test_a_resumed_session_continues_the_stored_context(a2a_server: A2AAgentServer, store: SQLiteStore) -> None:
    session = await a2a(a2a_server).open(store=store)
    await turns(session, "remember pelican")
    # A new provider object, as a second `seamline run --session ID` would make.
    resumed = await a2a(a2a_server).resume(session.session_id, store=store)
    assert resumed.resumed == "native"
    (later,) = await turns(resumed, "which bird?")
    assert ending(later).text == "heard: which bird? | before: remember pelican"
    assert a2a_server.log.turns[0][0] == a2a_server.log.turns[1][0]


@run_async
async def test_streamed_chunks_arrive_in_order_as_deltas_then_one_text(a2a_server: A2AAgentServer) -> None:
    (events,) = await turns(await a2a(a2a_server).open(), "ordered please")
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    whole = "heard: ordered please | before: -"
    assert len(deltas) == 3 and "".join(deltas) == whole
    kinds = [e.type for e in events]
    assert kinds.index("text") > max(i for i, k in enumerate(kinds) if k == "text_delta")
    assert texts(events) == [whole] and ending(events).text == whole
    # The card says it streams: the request was SendStreamingMessage.
    assert any(h.get("accept") == "text/event-stream" for h in a2a_server.log.headers)


@run_async
async def test_without_streaming_the_turn_is_sent_and_polled() -> None:
    with a2a_agent(streaming=False) as a2a_server:
        first, second = await turns(await a2a(a2a_server, poll_interval="0.05").open(), "one", "two")
    assert not any(isinstance(e, TextDelta) for e in first + second)
    assert ending(first).text == "heard: one | before: -"
    assert ending(second).text == "heard: two | before: one"
    assert not any(h.get("accept") == "text/event-stream" for h in a2a_server.log.headers)


@run_async
async def test_an_agents_question_is_answered_by_the_next_turn_on_the_same_task(a2a_server: A2AAgentServer) -> None:
    asked, answered = await turns(await a2a(a2a_server).open(), "ask me", "blue")
    assert ending(asked).stop_reason == "input_required" and ending(asked).text == "which colour?"
    assert ending(answered).text == "colour: blue"
    assert a2a_server.log.turns[0][1] == a2a_server.log.turns[1][1]  # the same task id


@run_async
async def test_an_agent_that_answers_with_a_message_ends_the_turn(a2a_server: A2AAgentServer) -> None:
    (events,) = await turns(await a2a(a2a_server).open(), "hello there")
    assert [e.text for e in events if isinstance(e, Text)] == ["hello to you, hello there"]
    assert ending(events).outcome == "completed"


@run_async
async def test_a_resumed_session_answers_the_question_its_last_turn_left(
    a2a_server: A2AAgentServer, store: SQLiteStore
) -> None:
    session = await a2a(a2a_server).open(store=store)
    await turns(session, "ask me")
    resumed = await a2a(a2a_server).resume(session.session_id, store=store)
    answered, later = await turns(resumed, "green", "and now?")
    assert ending(answered).text == "colour: green"
    assert a2a_server.log.turns[0][1] == a2a_server.log.turns[1][1]  # the task that asked
    assert a2a_server.log.turns[2][1] != a2a_server.log.turns[1][1]  # answered: the next turn is a new task
    assert ending(later).text == "heard: and now? | before: ask me, green"


@run_async
async def test_a_fork_is_a_new_context_given_the_history_as_text(
    a2a_server: A2AAgentServer, store: SQLiteStore
) -> None:
    session = await a2a(a2a_server).open(store=store)
    await turns(session, "remember the lighthouse")
    fork = await a2a(a2a_server).fork(session.session_id, store=store)
    (events,) = await turns(fork, "what to remember?")
    (parent_ctx, _, _), (fork_ctx, _, fork_text) = a2a_server.log.turns
    assert fork_ctx != parent_ctx and fork.provider_session_id == fork_ctx
    assert "remember the lighthouse" in fork_text and fork_text.rstrip().endswith("what to remember?")
    assert ending(events).outcome == "completed"
