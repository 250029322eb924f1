"""Codex kept warm: one live ``codex app-server`` per session, its thread opened once and
each turn a ``turn/start`` on it. The real program against the fake Responses API."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from seamline.events import Error, Event, Raw, Session, Text, TextDelta, ToolCall, ToolResult, Usage
from seamline.providers.agent_clis.codex import CodexProvider
from seamline.sandbox.journal import EditJournal, journal_path_for
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.transport.subprocess import group_gone, group_members
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.agent_cli_support import (
    CliWorld,
    assert_group_gone,
    cli_path,
    collect,
    make_world,
    one_complete,
    run_async,
)

pytestmark = pytest.mark.real
MODEL = "gpt-5"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def provider(fake: FakeOpenAI, **options: str) -> CodexProvider:
    # Codex's own sandbox cannot work under the tests' /tmp home (see test_codex_real.py).
    merged = {
        "executable": cli_path("codex"),
        "base_url": fake.base_url,
        "max_retries": "0",
        "sandbox": "danger-full-access",
        **options,
    }
    return CodexProvider(model=MODEL, options=merged)


def pid_of(session: object) -> int:
    return session.state["cli_process"].pid  # type: ignore[attr-defined, no-any-return]


def inputs(fake: FakeOpenAI) -> list[str]:
    return [json.dumps(r.body.get("input")) for r in fake.model_requests()]


def seamline_notices(events: list[Event]) -> list[dict[str, object]]:
    return [e.payload for e in events if isinstance(e, Raw) and e.source == "seamline"]  # type: ignore[misc]


@run_async
async def test_turns_of_a_session_share_one_process_and_one_thread(world: CliWorld, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    script = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat notes.txt"}}]},
        {"text": "The word is pelican.", "usage": {"input_tokens": 200, "output_tokens": 7, "cache_read_tokens": 50}},
        *({"text": f"Answer {n}.", "usage": {"input_tokens": 100 * n, "output_tokens": n}} for n in (2, 3)),
    ]
    with FakeOpenAI(script) as fake:
        codex = provider(fake)
        session = await codex.open(workspace=world.workspace, store=store)
        first = await collect(session, "marker-1: what is the secret word?")
        pid = pid_of(session)
        later = [await collect(session, f"marker-{n}") for n in (2, 3)]
        pids = {pid, pid_of(session)}
        seen = inputs(fake)
        await codex.close(session)
    assert len(pids) == 1  # one process for the whole session
    assert one_complete(first).text == "The word is pelican."
    calls = [e for e in first if isinstance(e, ToolCall)]
    results = [e for e in first if isinstance(e, ToolResult)]
    assert [c.name for c in calls] == ["shell"] and "cat notes.txt" in str(calls[0].arguments["command"])
    assert [r.call_id for r in results] == [calls[0].call_id] and "pelican" in results[0].output
    # Deltas as Codex streams them, then the whole text: what the exec stream gives, and more.
    assert "".join(e.text for e in first if isinstance(e, TextDelta)) == "The word is pelican."
    assert [e.text for e in first if isinstance(e, Text)] == ["The word is pelican."]
    sessions = [e for e in first if isinstance(e, Session) and e.provider_session_id]
    assert sessions and sessions[-1].provider_session_id == session.provider_session_id
    # Each turn gets its own share of the thread's running totals (the first: two model calls).
    usage = [[(u.input_tokens, u.output_tokens) for u in events if isinstance(u, Usage)] for events in (first, *later)]
    # Through seamline's gateway: one figure per model call (turn 1 made two).
    assert usage == [[(10, 5), (200, 7)], [(200, 2)], [(300, 3)]]
    for n, events in zip((2, 3), later, strict=True):
        assert one_complete(events).text == f"Answer {n}." and not seamline_notices(events)
    assert "marker-1" in seen[-1] and "pelican" in seen[-1] and "marker-2" in seen[-1]  # one conversation
    assert_group_gone(session)
    rows = list(store.raw_rows(session.session_id))
    assert {r.turn for r in rows if r.direction == "out"} == {1, 2, 3}
    assert sum(1 for r in rows if r.direction == "out" and '"turn/completed"' in r.payload) == 3
    journal = EditJournal(journal_path_for(str(tmp_path / "store.db")))
    steps = [(s.tool, s.call_id) for s in journal.steps(session.session_id)]
    journal.close()
    assert steps == [("codex", f"turn-{n}") for n in (1, 2, 3)]  # a journal step per turn
    store.close()


@run_async
async def test_warm_false_starts_one_exec_per_turn(world: CliWorld) -> None:
    with FakeOpenAI([{"text": "One."}, {"text": "Two."}]) as fake:
        codex = provider(fake, warm="false")
        session = await codex.open(workspace=world.workspace)
        await collect(session, "zeppelin-marker")
        first = session.state["cli_process"]
        assert_group_gone(session)  # gone with its turn
        second = await collect(session, "what was the marker?")
        seen = inputs(fake)
        await codex.close(session)
    assert one_complete(second).text == "Two." and pid_of(session) != first.pid
    assert "exec" in first.argv and "app-server" not in first.argv
    assert "zeppelin-marker" in seen[-1]  # resumed with codex exec resume
    assert not [e for e in second if isinstance(e, TextDelta)]  # the exec stream has none
    assert_group_gone(session)


@run_async
async def test_a_killed_warm_process_is_replaced_by_a_resumed_thread(world: CliWorld, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    with FakeOpenAI([{"text": "One."}, {"text": "Two.", "usage": {"input_tokens": 40, "output_tokens": 2}}]) as fake:
        codex = provider(fake)
        session = await codex.open(workspace=world.workspace, store=store)
        await collect(session, "zeppelin-marker")
        first = session.state["cli_process"]
        # The whole group: codex is a Node launcher and the native app-server it runs.
        os.killpg(first.pgid, signal.SIGKILL)
        assert await group_gone(first.pgid, timeout=10)
        second = await collect(session, "what was the marker?")
        replaced = pid_of(session)
        seen = inputs(fake)
        await codex.close(session)
    assert one_complete(second).text == "Two." and replaced != first.pid
    assert seamline_notices(second) == [
        {
            "warm_process": "replaced",
            "ended": "exited",
            "pid": first.pid,
            "exit_code": -9,
            "resume": session.provider_session_id,
        }
    ]
    assert "zeppelin-marker" in seen[-1] and "One." in seen[-1]  # thread/resume of the stored thread
    # The resumed thread's totals start from its rollout: this turn's share only.
    assert [(u.input_tokens, u.output_tokens) for u in second if isinstance(u, Usage)] == [(40, 2)]
    assert group_members(first.pgid) == []
    assert_group_gone(session)
    store.close()


@run_async
async def test_abort_mid_turn_ends_only_the_turn(world: CliWorld) -> None:
    script = [{"text": "One."}, {"text": "a slow answer that will not finish", "delay": 30}, {"text": "Three."}]
    with FakeOpenAI(script) as fake:
        codex = provider(fake, grace="5")
        session = await codex.open(workspace=world.workspace)
        assert one_complete(await collect(session, "one")).outcome == "completed"
        pid = pid_of(session)

        async def abort_once_asked() -> None:
            while len(fake.model_requests()) < 2:  # Codex waits for the held-back answer
                await asyncio.sleep(0.05)
            await codex.abort(session)

        aborting = asyncio.create_task(abort_once_asked())
        second = await asyncio.wait_for(collect(session, "two"), timeout=60)
        await aborting
        third = await collect(session, "three")
        same = pid_of(session)
        seen = inputs(fake)
        await codex.close(session)
    final = one_complete(second)
    assert final.outcome == "aborted" and not [e for e in second if isinstance(e, Error)]
    assert not seamline_notices(second)  # no signal: Codex ended the turn itself (turn/interrupt)
    assert one_complete(third).text == "Three." and same == pid
    assert "turn_aborted" in seen[-1] and "two" in seen[-1]  # Codex knows the turn was cut
    assert_group_gone(session)


@run_async
async def test_close_and_idle_leave_no_process(world: CliWorld) -> None:
    with FakeOpenAI([{"text": "One."}, {"text": "Two."}]) as fake:
        codex = provider(fake, warm_idle="0.5", grace="1")
        session = await codex.open(workspace=world.workspace)
        await collect(session, "one")
        first = session.state["cli_process"]
        assert group_members(first.pgid) != []
        # Idle past warm_idle: the process is ended; the next turn resumes in a new one.
        assert await group_gone(first.pgid, timeout=15)
        second = await collect(session, "two")
        assert [n["ended"] for n in seamline_notices(second)] == ["idle"]
        assert one_complete(second).text == "Two." and pid_of(session) != first.pid
        live = session.state["cli_process"]
        assert group_members(live.pgid) != []
        await codex.close(session)
    assert group_members(live.pgid) == []
    assert_group_gone(session)


@run_async
async def test_resume_of_an_unknown_thread_fails_the_turn_and_leaves_no_process(world: CliWorld) -> None:
    with FakeOpenAI([{"text": "never asked", "times": -1}]) as fake:
        codex = provider(fake)
        session = await codex.open_resumed("0b5e5e5e-dead-4bad-8bad-00000000beef", workspace=world.workspace)
        events = await collect(session, "hi")
        asked = len(fake.model_requests())
    final = one_complete(events)
    errors = [e for e in events if isinstance(e, Error)]
    assert (final.outcome, final.stop_reason) == ("failed", "invalid_request")
    assert len(errors) == 1 and "no rollout found" in errors[0].message and asked == 0
    assert "cli_warm" not in session.state
    assert_group_gone(session)


@run_async
async def test_a_second_session_on_the_thread_takes_it_over_from_an_idle_one(world: CliWorld) -> None:
    # Codex lets one live process write a thread: the idle holder in this process hands it over.
    with FakeOpenAI([{"text": "One."}, {"text": "Two."}, {"text": "Three."}]) as fake:
        codex = provider(fake)
        first = await codex.open(workspace=world.workspace)
        await collect(first, "zeppelin-marker")
        holder = first.state["cli_process"]
        assert first.provider_session_id is not None
        again = await codex.open_resumed(first.provider_session_id, workspace=world.workspace)
        second = await collect(again, "what was the marker?")
        assert group_members(holder.pgid) == []  # ended before the other resumed the thread
        third = await collect(first, "and now?")  # back on the first session: taken back the same way
        seen = inputs(fake)
        await codex.close(first)
        await codex.close(again)
    assert one_complete(second).text == "Two." and "zeppelin-marker" in seen[1]
    assert one_complete(third).text == "Three." and "what was the marker?" in seen[2]
    notices = seamline_notices(third)
    assert [(n["ended"], n["pid"]) for n in notices] == [("handed_over", holder.pid)]
    assert_group_gone(first)
    assert_group_gone(again)


def test_an_unclosed_session_leaves_no_process_when_its_loop_ends(world: CliWorld) -> None:
    async def forget(codex: CodexProvider) -> tuple[int, list[int]]:
        session = await codex.open(workspace=world.workspace)
        await collect(session, "one")
        pgid = int(session.state["cli_process"].pgid)
        return pgid, group_members(pgid)  # never closed

    with FakeOpenAI([{"text": "One."}]) as fake:
        pgid, members = asyncio.run(forget(provider(fake)))
    assert len(members) >= 2  # the Node launcher and the native app-server
    assert group_members(pgid) == []
