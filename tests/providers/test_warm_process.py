"""The warm-process driver without the real program: a stand-in CLI that takes Claude
Code's turns on stdin and misbehaves on purpose (a turn that never ends, an interrupt it
ignores), so the bounds, the abort's fallback and the replacement of an ended process are
checked in a moment. The real program: tests/providers/test_claude_code_warm.py."""

from __future__ import annotations

import asyncio
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from seamline.events import Complete, Error, Event, Raw, Text, TextDelta
from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider
from seamline.providers.base import ProviderSession
from seamline.transport.subprocess import group_members

# Each user message is a turn. "hang": wait for an interrupt; "deaf": ignore everything,
# SIGINT included; "linger": answer, then outlive the end of stdin. Anything else is
# answered with the argv and the turn's number.
STAND_IN = r"""
import json, os, queue, signal, sys, threading, time
inbox = queue.Queue()
def read():
    for line in sys.stdin:
        inbox.put(json.loads(line))
    inbox.put(None)
threading.Thread(target=read, daemon=True).start()
def say(frame):
    print(json.dumps(frame, separators=(",", ":")), flush=True)
turns, cost, tokens, linger = 0, 0.0, 0, False
while True:
    msg = inbox.get()
    if msg is None:
        if linger:  # outlives its stdin: only a signal ends it
            time.sleep(60)
        break
    if msg["type"] == "control_request":
        say({"type": "control_response", "response": {"subtype": "success", "request_id": msg["request_id"]}})
        continue
    turns += 1
    prompt = msg["message"]["content"][0]["text"]
    linger = linger or prompt == "linger"
    say({"type": "system", "subtype": "init", "session_id": "stand-in-1", "model": "m"})
    if prompt == "deaf":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        time.sleep(60)
    if prompt == "hang":
        say({"type": "stream_event", "event": {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": "thinking..."}}})
        while (got := inbox.get())["type"] != "control_request":
            pass
        say({"type": "control_response", "response": {"subtype": "success", "request_id": got["request_id"]}})
        say({"type": "result", "subtype": "error_during_execution", "is_error": True, "session_id": "stand-in-1",
             "terminal_reason": "aborted_streaming", "total_cost_usd": cost})
        continue
    text = f"turn {turns}: " + " ".join(sys.argv[1:])
    say({"type": "assistant", "message": {"id": f"m{turns}", "content": [{"type": "text", "text": text}]}})
    cost += 0.25
    tokens += 10 * turns  # running totals, as Claude Code reports them
    usage = {"m": {"inputTokens": tokens, "outputTokens": turns, "costUSD": cost}}
    say({"type": "result", "subtype": "success", "is_error": False, "result": text, "session_id": "stand-in-1",
         "total_cost_usd": cost, "modelUsage": usage, "uuid": f"u{turns}"})
"""


@pytest.fixture(autouse=True)
def allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)


def stand_in(tmp_path: Path, **options: str) -> ClaudeCodeProvider:
    path = tmp_path / "bin" / "claude"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"#!{sys.executable}\n{STAND_IN}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return ClaudeCodeProvider(options={"executable": str(path), **options})


async def turn(session: ProviderSession, prompt: str) -> list[Event]:
    return [e async for e in session.send(prompt)]


def final(events: list[Event]) -> Complete:
    assert isinstance(events[-1], Complete) and sum(isinstance(e, Complete) for e in events) == 1, events
    return events[-1]


def notices(events: list[Event]) -> list[dict[str, Any]]:
    return [e.payload for e in events if isinstance(e, Raw) and e.source == "seamline" and "warm_process" in e.payload]


def pid(session: ProviderSession) -> int:
    return int(session.state["cli_process"].pid)  # type: ignore[attr-defined]


def gone(session: ProviderSession) -> bool:
    return group_members(session.state["cli_process"].pgid) == []  # type: ignore[attr-defined]


def test_turns_go_to_one_process_as_user_messages(tmp_path: Path) -> None:
    claude = stand_in(tmp_path)

    async def go() -> None:
        session = await claude.open(workspace=tmp_path)
        first, second = await turn(session, "one"), await turn(session, "two")
        assert pid(session) == pid(session) and not notices(first + second)
        assert final(first).text.startswith("turn 1: -p --input-format stream-json --output-format stream-json")
        assert final(second).text.startswith("turn 2: ") and "--session-id" in final(second).text
        first_pid = pid(session)
        await turn(session, "three")
        assert pid(session) == first_pid
        await claude.close(session)
        assert gone(session)

    asyncio.run(go())


def test_a_timed_out_turn_ends_the_process_and_the_next_resumes_in_a_new_one(tmp_path: Path) -> None:
    claude = stand_in(tmp_path, turn_timeout="1", grace="0.5")

    async def go() -> None:
        session = await claude.open(workspace=tmp_path)
        await turn(session, "one")
        stuck = await turn(session, "deaf")
        assert final(stuck).stop_reason == "timeout" and [e.kind for e in stuck if isinstance(e, Error)] == ["timeout"]
        assert gone(session)  # a turn cut short ends its process
        old = pid(session)
        after = await turn(session, "three")
        assert [(n["ended"], n["pid"], n["resume"]) for n in notices(after)] == [("turn_timeout", old, "stand-in-1")]
        assert final(after).text.startswith("turn 1: ") and "--resume stand-in-1" in final(after).text
        await claude.close(session)
        assert gone(session)

    asyncio.run(go())


def test_abort_interrupts_the_turn_and_keeps_the_process(tmp_path: Path) -> None:
    claude = stand_in(tmp_path, grace="5")

    async def go() -> None:
        session = await claude.open(workspace=tmp_path)
        await turn(session, "one")
        kept = pid(session)
        events: list[Event] = []
        async for event in session.send("hang"):
            events.append(event)
            if isinstance(event, TextDelta):
                # Aborted from inside the reading loop (as `seamline run` does when its stdout
                # closes): nobody reads while it waits, yet it sees the turn end, within grace.
                await claude.abort(session)
        assert (
            final(events).outcome == "aborted"
            and final(events).text == "thinking..."
            and not [e for e in events if isinstance(e, Error)]
        )
        assert not [e for e in events if isinstance(e, Raw) and e.source == "seamline"]  # no signal sent
        after = await turn(session, "three")
        assert pid(session) == kept and final(after).text.startswith("turn 3: ") and not notices(after)
        await claude.close(session)
        assert gone(session)

    asyncio.run(go())


def test_an_interrupt_ignored_past_grace_ends_the_process_group(tmp_path: Path) -> None:
    claude = stand_in(tmp_path, grace="0.5")

    async def go() -> None:
        session = await claude.open(workspace=tmp_path)
        await turn(session, "one")
        old = pid(session)
        aborting: asyncio.Task[None] | None = None
        events: list[Event] = []
        async for event in session.send("deaf"):
            events.append(event)
            if aborting is None:
                await asyncio.sleep(0.3)
                aborting = asyncio.create_task(claude.abort(session))
        assert aborting is not None
        await aborting
        assert final(events).outcome == "aborted" and gone(session)
        signals = [e.payload for e in events if isinstance(e, Raw) and "signals_sent" in e.payload]
        assert [s["signals_sent"] for s in signals] == ["SIGTERM"]  # SIGINT ignored, SIGTERM ended it
        after = await turn(session, "three")
        assert [n["ended"] for n in notices(after)] == ["aborted"] and pid(session) != old
        await claude.close(session)

    asyncio.run(go())


def test_abort_before_the_cli_has_the_turn_sends_it_nothing(tmp_path: Path) -> None:
    claude = stand_in(tmp_path)

    async def go() -> None:
        session = await claude.open(workspace=tmp_path)
        await turn(session, "one")
        events: list[Event] = []
        async for event in session.send("never sent"):
            events.append(event)
            if len(events) == 1:  # the turn's opening, before the message is written
                await claude.abort(session)
        assert final(events).outcome == "aborted" and not [e for e in events if isinstance(e, Text)]
        after = await turn(session, "three")
        assert final(after).text.startswith("turn 2: ")  # the CLI never saw the aborted one
        await claude.close(session)

    asyncio.run(go())


def test_a_turn_whose_message_no_process_takes_fails_and_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every write of the turn's message fails (the program stopped reading its stdin): the
    turn is tried on the session's process and on one fresh process, then fails with a
    transport error, and no third process is started and read without being sent the turn
    (which waited out turn_timeout)."""
    from seamline.providers.programs.warm_process import WarmProcess
    from seamline.transport.subprocess import LineProcess

    # A short turn_timeout: the unfixed code read a third process, never sent the turn, up to it.
    claude = stand_in(tmp_path, turn_timeout="2", grace="0.5")
    started: list[WarmProcess] = []
    writes: list[bytes] = []
    real_start = WarmProcess.start.__func__  # type: ignore[attr-defined]

    async def start(cls: type[WarmProcess], *args: Any, **kwargs: Any) -> WarmProcess:
        warm: WarmProcess = await real_start(cls, *args, **kwargs)
        started.append(warm)
        return warm

    async def refused(self: LineProcess, data: bytes) -> bool:
        writes.append(data)
        return False

    monkeypatch.setattr(WarmProcess, "start", classmethod(start))
    monkeypatch.setattr(LineProcess, "write", refused)

    async def go() -> list[Event]:
        session = await claude.open(workspace=tmp_path)
        try:
            return await turn(session, "never taken")
        finally:
            await claude.close(session)
            for warm in started:
                await warm.close(grace=0.5, because="test")

    events = asyncio.run(go())
    errors = [e for e in events if isinstance(e, Error)]
    assert final(events).outcome == "failed"
    assert [e.kind for e in errors] == ["transport"] and "did not take the turn" in errors[0].message
    assert len(started) == 2 and len(writes) == 2  # the session's process, then one fresh one
    assert all(group_members(warm.proc.pgid) == [] for warm in started)


def test_usage_of_each_turn_is_its_own(tmp_path: Path) -> None:
    claude = stand_in(tmp_path)

    async def go() -> list[list[tuple[int, float | None]]]:
        session = await claude.open(workspace=tmp_path)
        figures = []
        for prompt in ("one", "two", "three"):
            events = await turn(session, prompt)
            figures.append([(e.input_tokens, e.cost_usd) for e in events if e.type == "usage"])  # type: ignore[attr-defined]
        await claude.close(session)
        return figures

    assert asyncio.run(go()) == [[(10, 0.25)], [(20, 0.25)], [(30, 0.25)]]


def test_options_and_what_turns_warm_off(tmp_path: Path) -> None:
    session = ProviderSession(provider=None, session_id="0" * 32, workspace=tmp_path, store=None, tools=None)  # type: ignore[arg-type]
    assert ClaudeCodeProvider()._warm_wanted(session)
    assert not ClaudeCodeProvider(options={"warm": "false"})._warm_wanted(session)
    # Claude Code's --max-budget-usd bounds a process, which warm would make the session.
    assert not ClaudeCodeProvider(options={"max_budget_usd": "1"})._warm_wanted(session)
    with pytest.raises(Exception, match="warm"):
        ClaudeCodeProvider(options={"warm": "yes"})
    with pytest.raises(Exception, match="warm_idle"):
        ClaudeCodeProvider(options={"warm_idle": "0"})


def test_warm_invocation_message_interrupt_and_terminal_line(tmp_path: Path) -> None:
    claude = ClaudeCodeProvider(model="claude-opus-4-1")
    session = ProviderSession(provider=claude, session_id="0" * 32, workspace=tmp_path, store=None, tools=None)  # type: ignore[arg-type]
    warm = claude._warm_invocation(session=session, executable="claude", mode="resume", target="abc")
    assert warm.argv[:6] == ["claude", "-p", "--input-format", "stream-json", "--output-format", "stream-json"]
    assert ["--resume", "abc"] == warm.argv[8:10] and warm.env["CLAUDE_CODE_EAGER_FLUSH"] == "1"
    cold = claude._invocation(session=session, prompt="hi", executable="claude", mode="resume", target="abc")
    assert cold.argv[3:] == warm.argv[4:] and "CLAUDE_CODE_EAGER_FLUSH" not in cold.env
    line = json.loads(claude._warm_message('say "hi"\nthen stop'))
    assert line == {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": 'say "hi"\nthen stop'}]},
    }
    interrupt = claude._warm_interrupt()
    assert interrupt is not None and interrupt.endswith(b"\n")
    request = json.loads(interrupt)
    assert request["type"] == "control_request" and request["request"] == {"subtype": "interrupt"}
    assert request["request_id"] != json.loads(claude._warm_interrupt() or b"")["request_id"]
    assert claude._warm_terminal(b'{"type":"result","subtype":"success"}')
    assert not claude._warm_terminal(b'{"type":"assistant","message":{"content":"{\\"type\\":\\"result\\"}"}}')
    assert not claude._warm_terminal(b'{"type":"result"')  # cut short: not a frame


LEFT_OPEN = """
import asyncio, sys
from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider

async def one_turn() -> None:
    claude = ClaudeCodeProvider(options={"executable": sys.argv[1]})
    session = await claude.open(workspace=sys.argv[2])
    [e async for e in session.send("linger")]
    print(session.state["cli_process"].pgid, flush=True)

loop = asyncio.new_event_loop()
loop.run_until_complete(one_turn())  # the loop is never closed, the session never closed
"""


def test_a_warm_process_left_open_is_ended_when_python_exits(tmp_path: Path) -> None:
    import os
    import subprocess

    from seamline.transport.subprocess import pids_gone

    stand_in(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", LEFT_OPEN, str(tmp_path / "bin" / "claude"), str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pgid = int(done.stdout.split()[-1])
    assert pids_gone([pgid], timeout=30) == [] and group_members(pgid) == []


def test_a_session_without_a_key_to_keep_out_says_once_that_there_is_no_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    login = tmp_path / "config"  # a subscription login, as `claude` keeps it
    login.mkdir()
    (login / ".credentials.json").write_text("{}")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(login))
    claude = stand_in(tmp_path)

    def said(events: list[Event]) -> list[object]:
        return [e.payload for e in events if isinstance(e, Raw) and e.payload.get("gateway") == "off"]

    async def go() -> None:
        session = await claude.open(workspace=tmp_path)
        first, second = await turn(session, "one"), await turn(session, "two")
        await claude.close(session)
        notes = said(first)
        assert len(notes) == 1 and "ANTHROPIC_API_KEY" in str(notes[0]) and said(second) == []
        assert "model_gateway" not in session.state
        (tmp_path / "keyed").mkdir()
        keyed = stand_in(tmp_path / "keyed")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        other = await keyed.open(workspace=tmp_path)
        events = await turn(other, "one")
        await keyed.close(other)
        assert said(events) == []

    asyncio.run(go())
