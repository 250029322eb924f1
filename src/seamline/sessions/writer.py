"""The SQLite store's writer: a thread with its own connection that commits what the event
loop queues, so the loop never waits on SQLite.

The loop hands over one batch per turn of the event loop (everything its runs queued in
it) with a future; the writer takes every batch waiting when it is free and commits them
in one transaction, then settles their futures on their loop. Commits are
``synchronous = NORMAL`` in WAL mode: a commit survives the process being killed, which
is what "a crash keeps what was spent" asks. The statements are the same few strings
every time, so the connection's statement cache keeps them prepared.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

from seamline.errors import StorageFailure
from seamline.sessions.portable_store import ORPHAN_TIME, SKEY_SELECT, USAGE_INSERT, keyed_rows
from seamline.sessions.raw_packs import RAW_INSERT, packed_rows
from seamline.sessions.sqlite_file import connect

__all__ = ["Batch", "StoreWriter"]

_CACHE_KIB: Final = 256
"""The writer connection's page cache. It only appends rows and updates sessions by id, so
it needs the right edges of a few B-trees, not SQLite's default 2 MiB; the store's own
connection, which reads, keeps the default. At 1,000 runs in flight this was 1.3 KB a run."""


class Batch:
    """What one turn of the event loop queued: statements, raw rows and usage figures."""

    __slots__ = ("future", "loop", "rows", "statements", "usage", "writes")

    def __init__(
        self,
        statements: list[tuple[str, tuple[Any, ...]]],
        rows: list[tuple[Any, ...]],
        usage: list[tuple[Any, ...]],
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        future: asyncio.Future[None] | None = None,
        writes: list[str] | None = None,
    ) -> None:
        self.statements = statements
        self.rows = rows
        self.usage = usage
        self.loop = loop
        self.future = future
        self.writes = writes or []  # the usage journal's writes (other than figures) it holds


class StoreWriter:
    """One thread, one connection to the store file; :meth:`submit` never blocks."""

    def __init__(
        self,
        path: str,
        *,
        on_commit: Callable[[Sequence[Batch]], None] | None = None,
        known_skey: Callable[[str], str | None] | None = None,
    ) -> None:
        self.path = path
        self._on_commit = on_commit  # called on the thread, after each commit
        self._known_skey = known_skey  # the store's storage keys of its own sessions
        self._conn = connect(path, create_folder=False)
        self._conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
        self._inbox: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self._idle = threading.Condition()
        self._handed = 0  # batches handed over (only the submitting threads count them)
        self._done = 0  # batches committed or failed (only the writer counts them)
        self._failed: list[Batch] = []  # their rows go first into the next write
        self._stopped = False
        self.commits = 0
        self._thread = threading.Thread(target=self._serve, name="seamline-store-writer", daemon=True)
        self._thread.start()

    def submit(self, batch: Batch) -> None:
        if self._stopped:
            raise StorageFailure(f"the store {self.path} is closed")
        self._handed += 1
        self._inbox.put(batch)

    def take_failed(self) -> list[Batch]:
        """Batches whose commit failed, oldest first; the caller writes their rows again."""
        with self._idle:
            failed, self._failed = self._failed, []
        return failed

    def backlog(self) -> int:
        """Batches handed over and not yet committed (or failed)."""
        return self._handed - self._done

    def idle(self) -> bool:
        """Whether every batch handed over is committed (or has failed)."""
        return self._done == self._handed

    def wait_idle(self) -> None:
        """Block until every batch handed over is committed (or has failed)."""
        if self._done == self._handed:
            return
        with self._idle:
            while self._done != self._handed:
                self._idle.wait()

    def close(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._inbox.put(None)
            self._thread.join()
            self._conn.close()

    # -- the thread ---------------------------------------------------------------------------
    def _serve(self) -> None:
        inbox = self._inbox
        while True:
            first = inbox.get()
            if first is None:
                return
            batches = [first]
            stop = False
            while not inbox.empty():
                more = inbox.get_nowait()
                if more is None:
                    stop = True
                    break
                batches.append(more)
            error = self._commit(batches)
            if error is not None:
                with self._idle:
                    self._failed.extend(batches)
            elif self._on_commit is not None:
                self._on_commit(batches)
            self._settle(batches, error)
            with self._idle:
                self._done += len(batches)
                self._idle.notify_all()
            if stop:
                return

    def _commit(self, batches: Sequence[Batch]) -> StorageFailure | None:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for batch in batches:  # new session records before the rows that point at them
                    for sql, params in batch.statements:
                        if sql.startswith("INSERT"):
                            conn.execute(sql, params)
                rows = [r for b in batches for r in b.rows]
                if rows:
                    conn.executemany(RAW_INSERT, packed_rows(rows, self._skey))
                usage = [u for b in batches for u in b.usage]
                if usage:
                    conn.executemany(USAGE_INSERT, keyed_rows(usage, self._skey))
                for batch in batches:  # status updates after them
                    for sql, params in batch.statements:
                        if not sql.startswith("INSERT"):
                            conn.execute(sql, params)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            return StorageFailure(f"cannot write the store {self.path}: {exc}")
        self.commits += 1
        return None

    def _skey(self, session_id: str) -> str:
        """The session's storage key: the store's, for a session it writes; else read on this
        thread's connection (its record is written before its rows; see SessionStore._skey)."""
        known = self._known_skey(session_id) if self._known_skey is not None else None
        if known is not None:
            return known
        found = self._conn.execute(SKEY_SELECT, (session_id,)).fetchone()
        return found[0] if found and found[0] is not None else ORPHAN_TIME + session_id

    @staticmethod
    def _settle(batches: Sequence[Batch], error: StorageFailure | None) -> None:
        for batch in batches:
            if batch.loop is not None and batch.future is not None:
                try:
                    batch.loop.call_soon_threadsafe(_resolve, batch.future, error)
                except RuntimeError:  # the loop is closed: nobody waits any more
                    pass


def _resolve(future: asyncio.Future[None], error: StorageFailure | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
