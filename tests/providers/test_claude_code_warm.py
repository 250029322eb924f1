"""Claude Code kept warm: one live process per session, each turn a user message on its
stdin (``--input-format stream-json``). The real program against the fake Anthropic API."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from seamline.events import Error, Event, PermissionDecision, Raw, Session, Text, ToolCall, ToolResult, Usage
from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider
from seamline.sandbox.journal import EditJournal, journal_path_for
from seamline.sessions.rules import PermissionRules
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools.permissions import PermissionService
from seamline.transport.subprocess import group_gone, group_members
from tests.providers.agent_cli_support import (
    AgentAnthropic,
    CliWorld,
    assert_group_gone,
    cli_path,
    collect,
    make_world,
    one_complete,
    run_async,
)

pytestmark = pytest.mark.real
MODEL = "claude-sonnet-4-5"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def provider(fake: AgentAnthropic, **options: str) -> ClaudeCodeProvider:
    merged = {"executable": cli_path("claude"), "base_url": fake.root_url, "max_retries": "0", **options}
    return ClaudeCodeProvider(model=MODEL, options=merged)


def pid_of(session: object) -> int:
    return session.state["cli_process"].pid  # type: ignore[attr-defined, no-any-return]


def seamline_notices(events: list[Event]) -> list[dict[str, object]]:
    return [e.payload for e in events if isinstance(e, Raw) and e.source == "seamline"]  # type: ignore[misc]


@pytest.mark.parametrize("turns", [2, 5])
@run_async
async def test_turns_of_a_session_reuse_one_process(world: CliWorld, tmp_path: Path, turns: int) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    script = [{"text": f"Answer {n}.", "usage": {"input_tokens": 100 * n, "output_tokens": n}} for n in range(1, 6)]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake)
        session = await claude.open(workspace=world.workspace, store=store)
        pids: list[int] = []
        costs: list[float] = []
        for n in range(1, turns + 1):
            events = await collect(session, f"marker-{n}")
            final = one_complete(events)
            assert final.outcome == "completed" and final.text == f"Answer {n}."
            assert [e.text for e in events if isinstance(e, Text)] == [f"Answer {n}."]
            usage = [e for e in events if isinstance(e, Usage)]
            # The process reports running totals; each turn gets its own figures and cost.
            assert [(u.input_tokens, u.output_tokens) for u in usage] == [(100 * n, n)]
            assert usage[0].priced and usage[0].cost_usd is not None and usage[0].cost_usd > 0
            costs.append(usage[0].cost_usd)
            sessions = [e for e in events if isinstance(e, Session)]
            assert {s.provider_session_id for s in sessions if s.provider_session_id} == {session.provider_session_id}
            assert not seamline_notices(events)
            pids.append(pid_of(session))
        requests = fake.turn_requests()
        last = json.dumps(requests[-1].body["messages"])
        await claude.close(session)
    assert len(set(pids)) == 1 and len(requests) == turns
    assert all(f"marker-{n}" in last for n in range(1, turns + 1))  # one conversation
    assert_group_gone(session)
    rows = list(store.raw_rows(session.session_id))
    results = [json.loads(r.payload) for r in rows if r.direction == "out" and '"type":"result"' in r.payload]
    assert [r["result"] for r in results] == [f"Answer {n}." for n in range(1, turns + 1)]
    # The ledger sums each turn's own cost, which adds up to the process's running total.
    ledger = [row.cost_usd or 0.0 for row in store.usage_rows(session.session_id)]
    assert ledger == pytest.approx(costs) and sum(costs) == pytest.approx(results[-1]["total_cost_usd"])
    assert {r.turn for r in rows if r.direction == "out"} == set(range(1, turns + 1))
    journal = EditJournal(journal_path_for(str(tmp_path / "store.db")))
    steps = [(s.tool, s.call_id) for s in journal.steps(session.session_id)]
    journal.close()
    assert steps == [("claude-code", f"turn-{n}") for n in range(1, turns + 1)]  # a journal step per turn
    store.close()


@run_async
async def test_abort_mid_turn_two_ends_the_turn_and_turn_three_works(world: CliWorld) -> None:
    script = [{"text": "One."}, {"text": "a slow answer that will not finish", "delay": 30}, {"text": "Three."}]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake, grace="5")
        session = await claude.open(workspace=world.workspace)
        assert one_complete(await collect(session, "one")).outcome == "completed"
        pid = pid_of(session)

        async def abort_once_asked() -> None:
            while len(fake.turn_requests()) < 2:  # the CLI waits for the held-back answer
                await asyncio.sleep(0.05)
            await claude.abort(session)

        aborting = asyncio.create_task(abort_once_asked())
        second = await asyncio.wait_for(collect(session, "two"), timeout=60)
        await aborting
        third = await collect(session, "three")
        same = pid_of(session)
        await claude.close(session)
    final = one_complete(second)
    assert final.outcome == "aborted" and not [e for e in second if isinstance(e, Error)]
    assert not seamline_notices(second)  # no signal: the CLI ended the turn itself
    assert one_complete(third).text == "Three." and same == pid
    assert [e.input_tokens for e in third if isinstance(e, Usage)] == [10]
    assert_group_gone(session)


@run_async
async def test_a_killed_warm_process_is_replaced_by_a_resumed_one(world: CliWorld, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    with AgentAnthropic([{"text": "One."}, {"text": "Two."}], fallback={"text": "side"}) as fake:
        claude = provider(fake)
        session = await claude.open(workspace=world.workspace, store=store)
        await collect(session, "zeppelin-marker")
        first = session.state["cli_process"]
        os.kill(first.pid, signal.SIGKILL)
        assert await group_gone(first.pgid, timeout=10)
        second = await collect(session, "what was the marker?")
        replaced = pid_of(session)
        requests = fake.turn_requests()
        await claude.close(session)
    assert one_complete(second).text == "Two." and replaced != first.pid
    notices = seamline_notices(second)
    assert notices == [
        {
            "warm_process": "replaced",
            "ended": "exited",
            "pid": first.pid,
            "exit_code": -9,
            "resume": session.provider_session_id,
        }
    ]
    assert "zeppelin-marker" in json.dumps(requests[-1].body["messages"])  # the CLI resumed its session
    rows = list(store.raw_rows(session.session_id))
    assert any(r.turn == 1 and "One." in r.payload for r in rows)  # nothing of turn 1 is lost
    assert any(r.turn == 2 and "Two." in r.payload for r in rows)
    assert group_members(first.pgid) == []
    assert_group_gone(session)
    store.close()


@run_async
async def test_stored_deny_rule_refuses_a_shell_call_on_turn_two(world: CliWorld) -> None:
    marker = world.workspace / "marker"
    rules = PermissionRules(":memory:")
    rules.add("deny", tool="Bash", pattern="command=touch*")
    service = PermissionService(rules=rules, workspace=world.workspace, yes=True)
    script = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo allowed"}}]},
        {"text": "Echoed."},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": f"touch {marker}"}}]},
        {"text": "Done."},
    ]
    with AgentAnthropic(script, fallback={"text": "side"}) as fake:
        claude = provider(fake, allowed_tools="Bash", permission_mode="bypassPermissions")
        session = await claude.open(workspace=world.workspace, approval=service)
        first = await collect(session, "echo something")
        socket = session.state["runtime_dir"] / "approve.sock"
        assert socket.exists()  # the hook's socket lives as long as the warm process
        pid = pid_of(session)
        second = await collect(session, "make the marker")
        assert pid_of(session) == pid
        bridge = session.state["approval_bridge"]
        await claude.close(session)
        assert not bridge.running  # type: ignore[attr-defined]
    assert [d.decision for d in first if isinstance(d, PermissionDecision)] == ["allow"]
    call = next(e for e in second if isinstance(e, ToolCall))
    decisions = [e for e in second if isinstance(e, PermissionDecision)]
    assert [(d.request_id, d.decision) for d in decisions] == [(f"perm-{call.call_id}", "deny")]
    assert "denied by rule" in decisions[0].reason
    result = next(e for e in second if isinstance(e, ToolResult))
    assert result.is_error and one_complete(second).outcome == "completed"
    assert not marker.exists() and not socket.exists()
    assert_group_gone(session)


@run_async
async def test_close_and_idle_leave_no_process(world: CliWorld) -> None:
    with AgentAnthropic([{"text": "One."}, {"text": "Two."}], fallback={"text": "side"}) as fake:
        claude = provider(fake, warm_idle="0.5", grace="1")
        session = await claude.open(workspace=world.workspace)
        await collect(session, "one")
        first = session.state["cli_process"]
        assert group_members(first.pgid) != []
        # Idle past warm_idle: the process is ended; the next turn resumes in a new one.
        assert await group_gone(first.pgid, timeout=15)
        second = await collect(session, "two")
        assert [n["ended"] for n in seamline_notices(second)] == ["idle"]
        assert one_complete(second).text == "Two." and pid_of(session) != first.pid
        await claude.close(session)
    assert_group_gone(session)


@run_async
async def test_warm_false_starts_a_process_per_turn(world: CliWorld) -> None:
    with AgentAnthropic([{"text": "One."}, {"text": "Two."}], fallback={"text": "side"}) as fake:
        claude = provider(fake, warm="false")
        session = await claude.open(workspace=world.workspace)
        await collect(session, "one")
        first = session.state["cli_process"]
        assert_group_gone(session)  # gone with its turn
        assert one_complete(await collect(session, "two")).text == "Two."
        assert pid_of(session) != first.pid
        assert_group_gone(session)
        await claude.close(session)


def test_an_unclosed_session_leaves_no_process_when_its_loop_ends(world: CliWorld) -> None:
    async def forget() -> int:
        session = await claude.open(workspace=world.workspace)
        await collect(session, "one")
        return int(session.state["cli_process"].pgid)  # never closed

    with AgentAnthropic([{"text": "One."}], fallback={"text": "side"}) as fake:
        claude = provider(fake)
        pgid = asyncio.run(forget())
    assert group_members(pgid) == []
