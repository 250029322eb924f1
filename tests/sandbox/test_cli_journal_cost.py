"""What journaling an agent CLI's turn costs: the edit journal is opened once per session
(and closed with it), and each turn is one write transaction, its step numbered in it."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from seamline.events import Complete, Event, FileChange, Text
from seamline.providers.programs.journal import journal_for_session, journaled_turn
from seamline.sandbox.journal import EditJournal, journal_path_for
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.testing import scripted


async def _turn(ws: Path, k: int) -> AsyncIterator[Event]:
    (ws / f"made{k}.txt").write_text(f"turn {k}\n")
    yield Text(text="done")
    yield Complete(outcome="completed", stop_reason="end_turn", text="done")


def test_one_journal_per_session_and_one_write_transaction_per_turn(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "kept.txt").write_text("kept\n")
    store = SQLiteStore(tmp_path / "s.db")

    async def go() -> tuple[list[list[str]], list[list[Event]], sqlite3.Connection]:
        provider = scripted([])
        session = await provider.open(store=store, workspace=ws)
        journal = journal_for_session(session)
        assert journal is not None
        traced: list[list[str]] = []
        events: list[list[Event]] = []
        for k in (1, 2, 3):
            session.turn = k
            seen: list[str] = []
            journal._db.set_trace_callback(seen.append)
            events.append([e async for e in journaled_turn(session, "codex", _turn(ws, k))])
            traced.append(seen)
            assert journal_for_session(session) is journal  # kept open between turns
        db = journal._db
        await provider.close(session)
        return traced, events, db

    try:
        traced, events, db = asyncio.run(go())
    finally:
        store.close()
    for k, (seen, got) in enumerate(zip(traced, events, strict=True), start=1):
        # one write transaction: the scan after the turn, the step and its entries
        assert [s for s in seen if s.startswith("BEGIN IMMEDIATE")] == ["BEGIN IMMEDIATE"], seen
        written = seen[seen.index("BEGIN IMMEDIATE") :]
        written = written[: written.index("COMMIT")]
        assert any(s.startswith("INSERT INTO steps") for s in written), seen
        assert any(s.startswith("INSERT INTO entries") for s in written), seen
        assert not [s for s in seen if "sqlite_master" in s or s.startswith("CREATE")], seen  # not opened again
        assert FileChange(path=str(ws / f"made{k}.txt"), kind="created") in got
        assert isinstance(got[-1], Complete)
    with pytest.raises(sqlite3.ProgrammingError):  # closed with the session
        db.execute("SELECT 1")
    journal = EditJournal(journal_path_for(tmp_path / "s.db"))
    try:
        (run_id,) = journal.run_ids()
        assert [(s.step, s.call_id, s.paths) for s in journal.steps(run_id)] == [
            (1, "turn-1", ("made1.txt",)),
            (2, "turn-2", ("made2.txt",)),
            (3, "turn-3", ("made3.txt",)),
        ]
    finally:
        journal.close()
