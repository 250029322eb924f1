"""The SQLite store's writer thread: concurrent runs' commits leave the event loop, are
batched, are on disk before a caller sees them, and a failed commit loses nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from seamline.errors import StorageFailure
from seamline.events import Usage
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.sessions.writer import Batch, StoreWriter
from seamline.testing import scripted
from seamline.tools import Toolset, tool


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key


def _writer(store: SQLiteStore) -> StoreWriter:
    return store._start_writer()


async def _usage_committed(store: SQLiteStore, session_id: str, usage: Usage) -> None:
    """A figure (journaled at once) and then a group commit awaited, as a turn's end does."""
    await store.record_usage_grouped(session_id, 1, usage)
    await store.commit_soon()


def test_concurrent_runs_share_lazy_commits(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    observer = SQLiteStore(tmp_path / "s.db")
    on_loop: list[str] = []
    store._conn.set_trace_callback(on_loop.append)
    seen_on_disk: list[int] = []

    async def one(i: int) -> None:
        script = [{"text": f"r{i}", "usage": {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.001}}]
        session = await scripted(script).open(store=store)
        async for event in session.send("go"):
            if isinstance(event, Usage):
                seen_on_disk.append(len(observer.usage_rows(session.session_id)))

    async def go() -> None:
        await asyncio.gather(*(one(i) for i in range(40)))

    asyncio.run(go())
    assert seen_on_disk == [1] * 40  # each figure readable (journal or ledger) before its caller saw it
    sessions = observer.list_sessions(limit=100)  # a read in this process commits what is queued first
    assert len(sessions) == 40 and all(s.status == "completed" for s in sessions)
    store._conn.set_trace_callback(None)
    # 40 session records, then 40 turn ends carrying the usage figures: far fewer commits
    assert 1 <= len([s for s in on_loop if s.startswith("BEGIN IMMEDIATE")]) <= 12, on_loop
    store.close()
    observer.close()


def test_runs_waiting_together_commit_on_the_writer_thread(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    assert store._writer is None  # no thread nor second connection until runs share a commit
    on_loop: list[str] = []
    writer_threads: set[int] = set()
    for i in range(40):
        store.create_session(f"s{i}", provider="p", model=None)
    writer = _writer(store)
    store._conn.set_trace_callback(on_loop.append)
    writer._conn.set_trace_callback(lambda sql: writer_threads.add(threading.get_ident()))

    async def go() -> int:
        await asyncio.gather(*(_usage_committed(store, f"s{i}", Usage(input_tokens=i)) for i in range(40)))
        return threading.get_ident()

    loop_thread = asyncio.run(go())
    store._conn.set_trace_callback(None)
    assert not [sql for sql in on_loop if sql.startswith(("INSERT", "UPDATE", "COMMIT"))], on_loop
    assert writer_threads and loop_thread not in writer_threads
    assert 1 <= writer.commits <= 12, writer.commits  # shared: far fewer than the 40 waiters
    assert sum(store.totals(f"s{i}").input_tokens for i in range(40)) == sum(range(40))
    store.close()


def test_close_writes_what_is_queued(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    observer = SQLiteStore(tmp_path / "s.db")
    for sid in ("a", "b"):
        store.create_session(sid, provider="p", model=None)

    async def go() -> None:
        await asyncio.gather(*(_usage_committed(store, sid, Usage(input_tokens=3)) for sid in ("a", "b")))
        store.append_raw("a", 1, "out", "event", '"late"')  # queued, never awaited

    asyncio.run(go())
    assert _writer(store).commits >= 1
    store.close()
    assert [r.payload for r in observer.raw_rows("a")] == ['"late"']
    assert [u.input_tokens for u in observer.usage_rows("b")] == [3]
    observer.close()


def test_a_failed_writer_commit_fails_its_waiters_and_keeps_the_rows(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    for sid in ("a", "b"):
        store.create_session(sid, provider="p", model=None)
    writer = _writer(store)
    writer._conn.execute("PRAGMA busy_timeout = 50")
    blocker = sqlite3.connect(tmp_path / "s.db", timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")

    async def go() -> list[object]:
        return list(
            await asyncio.gather(
                *(_usage_committed(store, sid, Usage(input_tokens=5)) for sid in ("a", "b")),
                return_exceptions=True,
            )
        )

    try:
        results = asyncio.run(go())
    finally:
        blocker.rollback()
        blocker.close()
    assert len(results) == 2 and all(isinstance(r, StorageFailure) for r in results), results
    assert "cannot write the store" in str(results[0])
    store.flush()  # a later write carries the failed batch
    assert [u.input_tokens for u in store.usage_rows("a")] == [5]
    assert [u.input_tokens for u in store.usage_rows("b")] == [5]
    store.close()


def test_an_in_memory_store_has_no_writer() -> None:
    store = SQLiteStore(":memory:")
    for sid in ("a", "b"):
        store.create_session(sid, provider="p", model=None)

    async def go() -> None:
        await asyncio.gather(*(store.record_usage_grouped(sid, 1, Usage(input_tokens=1)) for sid in ("a", "b")))

    asyncio.run(go())
    assert store._writer is None
    assert [u.input_tokens for u in store.usage_rows("a")] == [1]
    store.close()


def test_sequential_runs_share_lazy_commits_and_a_read_sees_them_at_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    on_loop: list[str] = []
    store._conn.set_trace_callback(on_loop.append)

    async def go() -> None:
        for i in range(20):
            script = [{"text": f"r{i}", "usage": {"input_tokens": 1}}]
            provider = scripted(script)
            session = await provider.open(store=store)
            [e async for e in session.send("go")]
            await provider.close(session)

    asyncio.run(go())
    sessions = store.list_sessions(limit=100)  # a read of this store commits what is queued first
    assert len(sessions) == 20 and all(s.status == "completed" for s in sessions)
    commits = [s for s in on_loop if s.startswith("BEGIN IMMEDIATE")]
    assert 1 <= len(commits) < 20, on_loop  # far fewer than the 40 records and ends
    assert store._writer is None  # lazy commits are made on the loop: no thread, no hand-over
    store.close()


@pytest.mark.parametrize("runs", [1, 30])
def test_every_usage_is_on_disk_before_the_caller_sees_it(tmp_path: Path, runs: int) -> None:
    """Lone runs commit on the loop, concurrent ones on the writer: the promise is the same."""
    store = SQLiteStore(tmp_path / "s.db")
    observer = SQLiteStore(tmp_path / "s.db")
    script = [
        {"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}], "usage": {"input_tokens": n}}
        for n in range(1, 4)
    ] + [{"text": "done", "usage": {"input_tokens": 4}}]
    lags: list[int] = []

    async def one() -> None:
        session = await scripted(script).open(store=store, tools=Toolset([lookup]))
        async for event in session.send("go"):
            if isinstance(event, Usage):
                on_disk = [u.input_tokens for u in observer.usage_rows(session.session_id)]
                lags.append(event.input_tokens - (on_disk[-1] if on_disk else 0))

    async def go() -> None:
        await asyncio.gather(*(one() for _ in range(runs)))

    asyncio.run(go())
    assert lags == [0] * (4 * runs)
    store.close()
    observer.close()


def test_a_run_cancelled_during_a_group_commit_leaves_the_others_and_its_figure(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    for sid in ("a", "b"):
        store.create_session(sid, provider="p", model=None)

    async def go() -> tuple[bool, object]:
        first = asyncio.create_task(_usage_committed(store, "a", Usage(input_tokens=7)))
        second = asyncio.create_task(_usage_committed(store, "b", Usage(input_tokens=8)))
        await asyncio.sleep(0)  # both wait on one group commit now
        first.cancel()
        done = await asyncio.gather(first, second, return_exceptions=True)
        return isinstance(done[0], asyncio.CancelledError), done[1]

    cancelled, other = asyncio.run(go())
    assert cancelled and other is None
    assert [u.input_tokens for u in store.usage_rows("a")] == [7]  # its figure was written all the same
    assert [u.input_tokens for u in store.usage_rows("b")] == [8]
    store.close()


def test_a_figure_waits_for_a_writer_that_is_behind(tmp_path: Path) -> None:
    """Backpressure: the figure is journaled at once (a reader sees it), but the run waits
    while the writer is more than two batches behind, so queued rows do not pile up."""
    store = SQLiteStore(tmp_path / "s.db")
    reader = SQLiteStore(tmp_path / "s.db")
    store.create_session("a", provider="p", model=None)
    writer = _writer(store)
    blocker = sqlite3.connect(tmp_path / "s.db", timeout=0)
    blocker.execute("BEGIN IMMEDIATE")  # the writer's next commit waits for it
    for _ in range(3):
        writer.submit(Batch([], [], []))

    async def go() -> tuple[bool, list[int]]:
        task = asyncio.create_task(store.record_usage_grouped("a", 1, Usage(input_tokens=4)))
        await asyncio.sleep(0.05)
        waiting, seen = not task.done(), [u.input_tokens for u in reader.usage_rows("a")]
        blocker.rollback()
        await task
        return waiting, seen

    try:
        waiting, seen = asyncio.run(go())
    finally:
        blocker.close()
    assert waiting and seen == [4]
    assert [u.input_tokens for u in reader.usage_rows("a")] == [4]
    store.close()
    reader.close()
