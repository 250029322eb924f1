"""Lazy commits of the SQLite store: a run's record and its turn's end are in the usage
journal before the caller sees them and reach the store with the writer's next commit. A
process killed before that commit loses nothing: the next open replays the session, its
rows, figures and final status; another process sees the run once the writer commits."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seamline.sessions.journal import journal_dir
from seamline.sessions.sqlite_store import SQLiteStore

# A child whose store never commits on its own (LAZY_S of an hour): it runs one turn with a
# tool call to its end, prints the session id and its events, then is killed with SIGKILL.
_RUN_THEN_DIE = """
import asyncio, json, os, signal, sys
import seamline.sessions.sqlite_store as store_module
store_module.LAZY_S = 3600.0
store_module._BACKSTOP_S = 3600.0
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.testing import scripted
from seamline.tools import Toolset, tool

@tool
def lookup(key: str) -> str:
    \"\"\"Look a key up.\"\"\"
    return key.upper()

store = SQLiteStore(sys.argv[1])
script = [
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}], "usage": {"input_tokens": 3, "output_tokens": 1}},
    {"text": "done", "usage": {"input_tokens": 5, "output_tokens": 2}},
]

async def go():
    session = await scripted(script).open(store=store, tools=Toolset([lookup]))
    events = [e.type async for e in session.send("look k up")]
    return session.session_id, events

sid, events = asyncio.run(go())
print(json.dumps({"session_id": sid, "events": events}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _committed_sessions(location: Path) -> list[tuple[str, str]]:
    """The sessions as committed, journals aside (a plain connection, nothing replayed)."""
    with sqlite3.connect(location) as conn:
        return conn.execute("SELECT id, status FROM sessions").fetchall()


def test_a_run_killed_before_its_lazy_commit_is_whole_after_the_next_open(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    location = tmp_path / "s.db"
    SQLiteStore(location).close()  # the file exists: the plain connection below reads it
    child = subprocess.Popen(
        [sys.executable, "-c", _RUN_THEN_DIE, str(location)],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out, err = child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL, err
    seen = json.loads(out)
    assert seen["events"][-1] == "complete"
    sid = seen["session_id"]
    assert _committed_sessions(location) == []  # nothing reached the store: all in the journal
    assert list(journal_dir(str(location)).glob("*.journal"))

    store = SQLiteStore(location)  # replays the dead process's journal
    try:
        record = store.require(sid)
        assert record.status == "completed"  # its turn's end, not "interrupted"
        assert [(u.input_tokens, u.output_tokens) for u in store.usage_rows(sid)] == [(3, 1), (5, 2)]
        events = [json.loads(r.payload).get("type") for r in store.raw_rows(sid) if r.source == "event"]
        assert events[-1] == "complete" and "tool_result" in events
        assert next(r.source for r in store.raw_rows(sid)) == "prompt"
        assert store.replay_journals() == 0  # nothing twice
    finally:
        store.close()
    assert not list(journal_dir(str(location)).glob("*.journal"))


def _seen_committed(location: Path, sid: str) -> bool:
    return (sid, "completed") in _committed_sessions(location)


def test_another_process_sees_a_finished_run_without_this_one_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    import seamline.sessions.sqlite_store as store_module
    from seamline.testing import scripted

    location = tmp_path / "s.db"
    store = SQLiteStore(location)

    async def one() -> str:
        provider = scripted([{"text": "done", "usage": {"input_tokens": 1}}])
        session = await provider.open(store=store)
        [e async for e in session.send("go")]
        return session.session_id

    async def while_the_loop_runs() -> bool:
        sid = await one()
        deadline = time.monotonic() + 30
        while not _seen_committed(location, sid) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the loop's turn: its lazy commit (LAZY_S) fires
        return _seen_committed(location, sid)

    try:
        # a plain connection (another process's view) sees the run finished, while this
        # process neither reads nor closes its store: the lazy commit, on the loop
        assert asyncio.run(while_the_loop_runs())
        # the loop ends long before its lazy commit is due: the backstop thread commits
        monkeypatch.setattr(store_module, "LAZY_S", 3600.0)
        sid = asyncio.run(one())
        deadline = time.monotonic() + 30
        while not _seen_committed(location, sid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _seen_committed(location, sid)
    finally:
        store.close()


def test_a_journal_of_format_1_is_still_replayed(tmp_path: Path) -> None:
    location = tmp_path / "s.db"
    store = SQLiteStore(location)
    store.create_session("s1", provider="p", model=None)
    store.close()
    folder = journal_dir(str(location))
    folder.mkdir(exist_ok=True)
    lines = [
        {"seamline_usage_journal": 1, "pid": 1, "host": "h"},
        ["s1", 1, 1, "in", "prompt", '"hi"', 1.0],
        ["u", "abcdabcdabcdabcd.1", "s1", 1, 1, 7, 1, 0, 0, None, 0, "m", 1.0],
    ]
    (folder / "1-abcdabcdabcdabcd.journal").write_text("".join(json.dumps(x) + "\n" for x in lines))
    store = SQLiteStore(location)
    try:
        assert [u.input_tokens for u in store.usage_rows("s1")] == [7]
        assert [r.payload for r in store.raw_rows("s1")] == ['"hi"']
    finally:
        store.close()


def test_the_backstop_waits_for_a_transaction_of_the_next_loop(tmp_path: Path) -> None:
    """`run_sync` twice on one store: the first loop is gone with its lazy commit planned,
    and the backstop thread comes while the store is inside a transaction of its next user.
    The backstop waits for it: it never writes into that transaction, nor are its rows rolled
    back with it."""
    import asyncio
    import threading

    location = tmp_path / "s.db"
    store = SQLiteStore(location)
    store.create_session("s1", provider="p", model=None)
    gone = asyncio.new_event_loop()
    gone.close()
    store._lazy_loop = gone  # the loop that planned the lazy commit has stopped
    backstop = threading.Thread(target=store._backstop, args=(gone,))
    try:
        with pytest.raises(RuntimeError, match="rolled back"), store._transaction():
            store._execute("INSERT INTO trace_heads VALUES ('t', 'h', 1, 0)")
            store.append_raw("s1", 1, "in", "prompt", '"hi"')  # queued: the backstop's to commit
            backstop.start()
            backstop.join(0.5)
            raise RuntimeError("rolled back")
        backstop.join(30)
        assert not backstop.is_alive()
        assert store._query("SELECT COUNT(*) FROM trace_heads") == [(0,)]
        assert [r.payload for r in store.raw_rows("s1")] == ['"hi"']  # committed after the rollback
    finally:
        store.close()
