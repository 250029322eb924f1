"""Session stores: the record of every session, its raw log, cost ledger and transcript.

:class:`SQLiteStore` is the embedded SQLite store (the default); ``PostgresStore`` in
:mod:`seamline.sessions.postgres` is the same interface on a PostgreSQL server, for
teams sharing a store. :func:`open_store` picks one from a path or a ``postgresql://`` URL.

Raw-log rows and usage figures are buffered and written in one transaction at the turn's
end (and sooner, without waiting, once many are queued). A usage figure is on disk before
it reaches the caller, so a crash keeps what was spent: the SQLite store appends it to this
process's usage journal (:mod:`seamline.sessions.journal`, one ``write()``), replayed into
the store when it is next opened; PostgreSQL commits it, and commits a turn's end before
its ``complete`` is handed over. On SQLite a new session's record and a turn's end are
journaled too and committed lazily on the event loop, within ``LAZY_S`` and shared by every
run of that time (a backstop thread commits for a loop that stopped first); a direct read
or write of the store in this process commits them first (``_sync``). Commits that several
runs wait for together go to the store's writer thread (:mod:`seamline.sessions.writer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Final

from seamline.errors import InvalidRequest, StorageFailure
from seamline.events import Usage
from seamline.locations import STORE_ENV, default_store_path
from seamline.sessions.journal import JournalRecord, UsageJournal, journal_dir, journal_tail, unreplayed_journals
from seamline.sessions.portable_store import (
    FINISH_UPDATE,
    SESSION_INSERT,
    USAGE_INSERT,
    RuleRow,
    SessionStore,
    storage_key,
)
from seamline.sessions.raw_packs import RAW_INSERT, covered_seqs, packed_rows
from seamline.sessions.records import (
    Direction,
    RawRow,
    SessionRecord,
    SessionStatus,
    Totals,
    UsageRow,
)
from seamline.sessions.schema import SCHEMA_VERSION, Dialect, migration_sql
from seamline.sessions.sqlite_file import APP_ID, connect, is_store_file, track
from seamline.sessions.writer import Batch, StoreWriter

# Queued rows past which a commit is started without anyone waiting on it: a long turn's
# raw log reaches the store as it goes, and many runs' rows never pile up in memory.
_BACKGROUND_ROWS: Final = 256
JOURNAL_BYTES: Final = 1 << 18  # uncommitted journal past which runs wait (past half: committed now)
LAZY_S: Final = 0.02
"""How long what is journaled waits for the next runs' rows before the lazy commit."""
_BACKSTOP_S: Final = 0.25  # after which a stopped loop's lazy commit is made by a thread
_RULES_FRESH_S: Final = 0.01  # how long the rules read are taken as current without asking SQLite
_RULE_CHANGES: Final[dict[str, int]] = {}  # rule changes made in this process, per store file
_BACKLOG_BATCHES: Final = 2  # batches the writer may be behind before a figure waits for it
_OPEN: Final[weakref.WeakSet[SQLiteStore]] = weakref.WeakSet()  # this process's open store files
_OPEN_LOCK: Final = threading.Lock()  # stores may be opened and synced on several threads
_LAZY: Final[set[str]] = set()  # files with lazy batches handed since the last sync (see SQLiteStore._sync)
_clock = time.monotonic  # (a test moves it)
_SESSION_REPLAY: Final = SESSION_INSERT.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)
_END_REPLAY: Final = FINISH_UPDATE + " AND updated_at <= ?"  # unless the session changed since


def _with_key(params: tuple[Any, ...]) -> tuple[Any, ...]:
    """A journaled session record's values for :data:`SESSION_INSERT`: a journal written
    before storage keys holds one value less, the key is made from its id and time."""
    if len(params) == SESSION_INSERT.count("?"):
        return params
    return (*params, storage_key(params[0], params[7]))


__all__ = [
    "STORE_ENV",
    "RawRow",
    "SessionRecord",
    "SQLiteStore",
    "SessionStore",
    "default_store_path",
    "is_store_file",
    "open_store",
]


def open_store(location: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> SessionStore:
    """A store at ``location``: a ``postgresql://`` URL or a file path (default: :func:`default_store_path`).

    Only the default location gets its folder created; a path given whose folder is
    missing is a :class:`~seamline.errors.StorageFailure`. ``read_only``: a store file that does not exist
    is not created; an empty store (in memory) stands in for it.
    """
    where = str(location) if location is not None else str(default_store_path())
    if where.startswith(("postgresql://", "postgres://")):
        from seamline.sessions.postgres import PostgresStore

        store: SessionStore = PostgresStore(where)
        return store
    if read_only and where != ":memory:" and not Path(where).expanduser().exists():
        if not Path(where).expanduser().parent.is_dir() and location is not None:
            raise InvalidRequest(f"the store's folder {Path(where).parent} does not exist")
        empty = SQLiteStore(":memory:")
        empty.location = where
        return empty
    return SQLiteStore(where, create_folder=location is None)


class _SQLiteTransaction(AbstractContextManager[None]):
    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    def __enter__(self) -> None:
        store = self._store
        store._conn_lock.acquire()  # held to the end of the transaction
        try:
            if store._depth == 0:
                store._run("BEGIN IMMEDIATE")
        except BaseException:
            store._conn_lock.release()
            raise
        store._depth += 1

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        store = self._store
        try:
            store._depth -= 1
            if store._depth == 0:
                store._run("ROLLBACK" if kind is not None else "COMMIT")
        finally:
            store._conn_lock.release()


class SQLiteStore(SessionStore):
    """The embedded store: one SQLite file in WAL mode, safe for several processes.

    >>> store = SQLiteStore(":memory:")
    >>> store.create_session("s1", provider="offline", model="extractive")
    >>> store.get("s1").status
    'open'
    """

    dialect: Dialect = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, create_folder: bool = False) -> None:
        super().__init__()
        self.path = self.location = str(path)
        self._depth = 0
        self._conn = connect(self.path, create_folder=create_folder)
        self._tracked = self.path != ":memory:"
        if self._tracked:
            track(self.path, +1)
        self._writer: StoreWriter | None = None  # started by the first group of several runs
        self._journal: UsageJournal | None = UsageJournal(self.path) if self._tracked else None
        self._background = False  # a commit nobody waits on is scheduled
        self._background_commit = False  # that commit is being handed over now
        self._rules: tuple[int, int, list[RuleRow]] | None = None  # (data_version, epoch, rows)
        self._rules_asked = -_RULES_FRESH_S  # when data_version was last asked (monotonic clock)
        self._rules_file = os.path.realpath(self.path)  # (its key in _RULE_CHANGES)
        self._raw_unjournaled = 0  # the last raw rows queued, not yet in the journal
        self._pending_writes: list[str] = []  # journal writes (other than figures) the queue holds
        self._syncing = False
        self._lazy_timer: asyncio.TimerHandle | None = None  # the planned lazy commit
        self._lazy_loop: asyncio.AbstractEventLoop | None = None
        self._lazy_thread = 0
        # One thread at a time on the connection, a transaction whole: the loop's, or the
        # backstop's (see _backstop), whose loop may be gone while another loop uses the store.
        self._conn_lock = threading.RLock()
        self._closed = False
        try:
            if self._tracked:
                with _OPEN_LOCK:
                    _OPEN.add(self)
            self._migrate()
            self.replay_journals()
            self.recover_interrupted()
        except BaseException:
            self._release()
            raise

    def _commit_group(self) -> None:
        """Hand what this turn of the event loop queued to the writer thread; the waiters
        resume once it is committed. A lone run with the writer idle commits here instead:
        nothing else waits on the loop, and a hand-over to the thread costs more CPU than
        the commit (see bench/README.md). A store used by one run at a time never starts
        the thread nor opens its second connection."""
        writer = self._writer
        if writer is None or (writer.idle() and not self._background_commit):
            if self._group_waiters <= 1 or not self._tracked:
                if writer is not None:
                    self._requeue_failed(writer)
                super()._commit_group()
                return
            try:
                writer = self._start_writer()
            except StorageFailure:
                super()._commit_group()  # commits here, or fails its waiters with the cause
                return
        waiter, self._group_commit = self._group_commit, None
        self._group_waiters = 0
        self._requeue_failed(writer)
        batch = Batch(self._pending_statements, self._pending, self._pending_usage, writes=self._pending_writes)
        self._pending_statements, self._pending, self._pending_usage = [], [], []
        self._take_pending()
        self._pending_writes = []
        if waiter is not None:
            batch.loop, batch.future = waiter.get_loop(), waiter
        try:
            writer.submit(batch)
        except StorageFailure as exc:
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)

    def _start_writer(self) -> StoreWriter:
        if self._writer is None:
            self._writer = StoreWriter(self.path, on_commit=self._batches_committed, known_skey=self._known_skey)
        return self._writer

    def _batches_committed(self, batches: Sequence[Batch]) -> None:
        journal = self._journal
        if journal is not None:
            journal.committed(u[-1] for b in batches for u in b.usage)
            journal.committed(w for b in batches for w in b.writes)

    # -- lazy commits: what is in the journal reaches the store with the next runs' -----------
    async def _open_record(self, statement: tuple[str, tuple[Any, ...]]) -> None:
        """The record goes to this process's journal now (a SIGKILL keeps it) and to the
        store with the next lazy commit, within :data:`LAZY_S` (sooner when this store is
        read or written directly): many short runs share one commit instead of two each."""
        journal = self._journal
        if journal is None:
            await super()._open_record(statement)
            return
        with self._conn_lock:
            self._pending_writes.append(journal.append(None, records=(("s", *statement[1]),)))
            self._pending_statements.append(statement)
        self._commit_lazily()

    async def _end_turn(self, session_id: str, status: SessionStatus, now: float) -> None:
        """The turn's rows, figures and final status go to the journal (what is not there
        yet, in one ``write()``) and to the store with the next lazy commit (see
        :meth:`_open_record`); nothing is awaited unless the store is far behind."""
        if self._journal is None:
            await super()._end_turn(session_id, status, now)
            return
        with self._conn_lock:
            self._pending_statements.append((FINISH_UPDATE, (status, now, session_id)))
            self._journal_queued((("e", session_id, status, now),))
        self._commit_lazily()
        if self._behind():
            await self.commit_soon()

    def _behind(self) -> bool:
        """Whether the store is so far behind that a run should wait for a commit: the
        writer more than :data:`_BACKLOG_BATCHES` behind, or more uncommitted journal than
        :data:`JOURNAL_BYTES` (the figures are safe either way: this is backpressure)."""
        journal = self._journal
        if journal is None:
            return False
        writer = self._writer
        return (writer is not None and writer.backlog() > _BACKLOG_BATCHES) or journal.pending_bytes() > JOURNAL_BYTES

    def flush_soon(self) -> None:
        """What is queued, into the journal now and the store with the next lazy commit."""
        if self._journal is None or not (self._pending or self._pending_usage or self._pending_statements):
            self.flush()
            return
        self._journal_queued(())
        self._commit_lazily()

    def _journal_queued(self, records: Sequence[tuple[Any, ...]]) -> None:
        """The raw rows queued since the last write, and ``records``, in one ``write()``."""
        journal = self._journal
        assert journal is not None
        fresh, self._raw_unjournaled = self._raw_unjournaled, 0
        if records or fresh:
            self._pending_writes.append(journal.append(None, self._pending[-fresh:] if fresh else (), records))

    def _commit_lazily(self) -> None:
        """What is queued is in the journal: commit it on this event loop within
        :data:`LAZY_S`, with whatever the next runs queue meanwhile (here and now once half
        of :data:`JOURNAL_BYTES` waits: runs that never give the loop a turn still commit).
        On the loop's own thread, not the writer's: one commit for many runs costs less
        there than handing their rows to a thread. Should the loop stop first, a backstop
        thread commits it (:meth:`_backstop`)."""
        _LAZY.add(self.path)
        journal = self._journal
        if journal is not None and journal.pending_bytes() > JOURNAL_BYTES // 2:
            self._lazy_commit()
            return
        if self._lazy_timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop here: written now
            self.flush()
            return
        self._lazy_timer = loop.call_later(LAZY_S, self._lazy_commit)
        self._lazy_loop, self._lazy_thread = loop, threading.get_ident()
        backstop = threading.Timer(_BACKSTOP_S, self._backstop, args=(loop,))
        backstop.daemon = True
        backstop.start()

    def _lazy_commit(self) -> None:
        """The lazy commit, on the loop: here, or on the writer thread after the batches it
        is committing (never before them). A failure keeps the rows queued for the next."""
        if self._lazy_timer is not None:
            self._lazy_timer.cancel()
            self._lazy_timer = None
        writer = self._writer
        try:
            if writer is not None and not writer.idle():
                self._commit_in_background()
            else:
                with self._unsynced():  # this store's own commit: no other store to wait for
                    self.flush()
        except StorageFailure:
            pass  # still queued (and journaled): the next commit, a read or close tries again

    def _backstop(self, loop: asyncio.AbstractEventLoop) -> None:
        """On a thread of its own, :data:`_BACKSTOP_S` after a lazy commit was planned: if
        the loop has stopped meanwhile (its ``asyncio.run`` ended), the timer never fires;
        commit here. Another loop may use the store meanwhile: the connection lock keeps
        the two apart, a transaction and the queue's handing-over whole."""
        if loop.is_running() or self._lazy_loop is not loop or self._closed:
            return
        with self._conn_lock:
            if self._lazy_timer is not None:
                self._lazy_timer.cancel()
                self._lazy_timer = None
            with contextlib.suppress(StorageFailure):
                self.flush()

    def _sync(self) -> None:
        """Before a direct read or write: what this process's stores of this file queued
        for a lazy commit is committed first (read your own writes, and write after them).
        A store whose loop runs on another thread is asked to commit and not waited for."""
        self._syncing = True
        try:
            _LAZY.discard(self.path)  # first: rows queued meanwhile mark the file again
            with _OPEN_LOCK:
                stores = [s for s in _OPEN if s.path == self.path]
            here = threading.get_ident()
            for store in stores:
                if store._lazy_timer is None and store is not self:
                    continue
                loop = store._lazy_loop
                if store is not self and loop is not None and loop.is_running() and store._lazy_thread != here:
                    loop.call_soon_threadsafe(store._lazy_commit)
                    continue
                if store._lazy_timer is not None:
                    store._lazy_timer.cancel()
                    store._lazy_timer = None
                store.flush()
        finally:
            self._syncing = False

    # -- the usage journal ------------------------------------------------------------------
    async def record_usage_grouped(self, session_id: str, turn: int, usage: Usage) -> None:
        """The figure goes to this process's usage journal now (on disk when this returns:
        a SIGKILL keeps it) and to the ledger with the turn's commit; nothing is awaited."""
        if self._journal is None:
            await super().record_usage_grouped(session_id, turn, usage)
            return
        self._queue_usage(session_id, turn, usage)
        if self._behind():
            await self.commit_soon()  # the writer is behind: wait for it, so rows do not pile up
        elif not self._background and len(self._pending) + len(self._pending_usage) >= _BACKGROUND_ROWS:
            self._background = True
            asyncio.get_running_loop().call_soon(self._commit_in_background)

    def _commit_in_background(self) -> None:
        """A commit nobody waits on: on the writer thread once runs have shared one (the
        loop goes on meanwhile), else here. A failure keeps the rows queued for the next."""
        self._background = False
        if self._group_commit is None:  # else the group commit about to run takes them
            self._background_commit = True
            try:
                self._commit_group()
            finally:
                self._background_commit = False

    def _journal_usage(self, row: tuple[Any, ...]) -> str | None:
        """The figure, with the raw rows queued since the last one, in one ``write()``: a
        crash mid-turn keeps the turn's log as far as its last reported figure."""
        if self._journal is None:
            return None
        fresh, self._raw_unjournaled = self._raw_unjournaled, 0
        return self._journal.append(row, self._pending[-fresh:] if fresh else ())

    def append_raw(self, session_id: str, turn: int, direction: Direction, source: str, payload: str) -> None:
        with self._conn_lock:  # never between a backstop's taking of the queue and its commit
            super().append_raw(session_id, turn, direction, source, payload)
            self._raw_unjournaled += 1

    def _queue_usage(self, session_id: str, turn: int, usage: Usage) -> None:
        with self._conn_lock:
            super()._queue_usage(session_id, turn, usage)

    def _take_pending(self) -> None:
        self._raw_unjournaled = 0  # on their way to a commit (a failed one keeps them in memory)

    def _usage_committed(self, usage: Sequence[tuple[Any, ...]]) -> None:
        if self._journal is not None:
            self._journal.committed(u[-1] for u in usage)

    def _last_usage_n(self, session_id: str) -> int:
        last = super()._last_usage_n(session_id)
        return max([last, *(r.n for r in self._journal_candidates([session_id]))])

    def _journal_candidates(self, session_ids: Sequence[str]) -> list[JournalRecord]:
        return journal_tail(self.path, session_ids) if self._tracked else []

    def _read_snapshot(self) -> AbstractContextManager[None]:
        return self._snapshot()

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        with self._conn_lock:
            if self._depth or self._conn.in_transaction:
                yield
                return
            self._run("BEGIN")
            try:
                yield
            finally:
                self._run("COMMIT")

    def replay_journals(self) -> int:
        """Write the figures of usage journals whose process is gone into the ledger (those
        not there yet), then remove the journals; how many figures were added. Runs when the
        store is opened; safe to run in several processes at once, or again after a crash."""
        if not self._tracked or not journal_dir(self.path).is_dir():
            return 0
        with unreplayed_journals(self.path) as found:
            records = [r for _, rs, _, _ in found for r in rs]
            raw = [r for _, _, rows, _ in found for r in rows]
            sessions = [r for *_, lines in found for r in lines]
            if not records and not raw and not sessions:
                return 0
            with self._transaction():
                # new sessions first (a record already there is the same one), then their rows
                self._executemany(_SESSION_REPLAY, [_with_key(r[1:]) for r in sessions if r[0] == "s"])
                sids = sorted({r[0] for r in raw})
                kept = {sid for sid in sids if self._query("SELECT 1 FROM sessions WHERE id = ?", (sid,))}
                self._executemany(RAW_INSERT, packed_rows(self._not_in_raw_log(raw, kept), self._skey))
                added = 0
                for record in self._not_in_ledger(records):  # of sessions not removed meanwhile
                    row = list(record.row)
                    skey = self._skey(record.session_id)
                    if self._query("SELECT 1 FROM usage_ledger WHERE skey = ? AND n = ?", (skey, record.n)):
                        row[1] = self._last("usage_ledger", "n", record.session_id) + 1
                    row[0] = skey
                    self._execute(USAGE_INSERT, row)
                    added += 1
                # a turn's end, unless the session changed since (resumed by another process)
                self._executemany(_END_REPLAY, [(r[2], r[3], r[1], r[3]) for r in sessions if r[0] == "e"])
        for sid in {r.session_id for r in records}:
            self._next_usage.pop(sid, None)
        return added

    def _not_in_raw_log(self, raw: Sequence[tuple[Any, ...]], kept: set[str]) -> list[tuple[Any, ...]]:
        """The journaled raw rows of sessions in ``kept`` that are not in the store yet: a row
        the owner committed is the same row, alone or in a pack of its own making."""
        first: dict[str, int] = {}
        for row in raw:
            if row[0] in kept:
                first[row[0]] = min(row[1], first.get(row[0], row[1]))
        covered = {sid: covered_seqs(self._raw_spans_from(sid, seq)) for sid, seq in first.items()}
        fresh: dict[tuple[str, int], tuple[Any, ...]] = {}
        for row in raw:
            if row[0] in kept and not covered[row[0]](row[1]):
                fresh.setdefault((row[0], row[1]), row)  # a row journaled twice is written once
        return sorted(fresh.values(), key=lambda r: (r[0], r[1]))

    def _raw_spans_from(self, session_id: str, seq: int) -> list[tuple[int, int]]:
        """(seq, packed) of the session's rows from the one holding ``seq`` on: what a journal
        of a long session is checked against, without reading the whole log."""
        skey = self._skey(session_id)
        start = self._query("SELECT MAX(seq) FROM raw_log WHERE skey = ? AND seq <= ?", (skey, seq))[0][0]
        return self._query("SELECT seq, packed FROM raw_log WHERE skey = ? AND seq >= ?", (skey, start or seq))

    def usage_rows(self, session_id: str) -> list[UsageRow]:
        with self._unsynced():  # journal first, then the ledger: every reported figure, no wait
            return super().usage_rows(session_id)

    def totals(self, session_id: str, *, include_descendants: bool = True) -> Totals:
        with self._unsynced():
            return super().totals(session_id, include_descendants=include_descendants)

    @contextmanager
    def _unsynced(self) -> Iterator[None]:
        """Reads that need not wait for lazy batches (see :meth:`_sync`)."""
        syncing, self._syncing = self._syncing, True
        try:
            yield
        finally:
            self._syncing = syncing

    def delete_session(self, session_id: str) -> None:
        self.flush()  # everything of this process in the store: no journal still holds the session's figures
        super().delete_session(session_id)

    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version``: it moves when another connection commits."""
        try:  # not a read of sessions: no need to wait for lazy batches (see _sync)
            with self._conn_lock:
                return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error as exc:
            raise StorageFailure(f"cannot use the store {self.path}: {exc}") from None

    # -- permission rules, cached -------------------------------------------------------------
    def permission_rule_rows(self) -> list[RuleRow]:
        """The rules, read again only when the database changed (``PRAGMA data_version``
        moves when another connection commits) or a store of this process changed them.
        SQLite is asked at most every 10 ms: a run's tool calls come microseconds apart, and
        a rule another process adds applies from the first call after that (a change made
        through any store of this process, at once)."""
        cached = self._rules
        epoch = _RULE_CHANGES.get(self._rules_file, 0)
        now = _clock()
        if cached is not None and cached[1] == epoch and now - self._rules_asked < _RULES_FRESH_S:
            return list(cached[2])
        version = self.data_version()
        self._rules_asked = now
        if cached is not None and cached[0] == version and cached[1] == epoch:
            return list(cached[2])
        with self._unsynced():  # rules are not session rows: no wait for the writer
            rows = super().permission_rule_rows()
        self._rules = (version, epoch, rows)
        return list(rows)

    def _rules_changed(self) -> None:
        with _OPEN_LOCK:
            _RULE_CHANGES[self._rules_file] = _RULE_CHANGES.get(self._rules_file, 0) + 1

    def add_permission_rule(
        self, effect: str, tool: str | None, tool_class: str | None, pattern: str | None, workspace: str | None
    ) -> tuple[int, float]:
        try:
            return super().add_permission_rule(effect, tool, tool_class, pattern, workspace)
        finally:
            self._rules_changed()

    def remove_permission_rule(self, rule_id: int) -> bool:
        try:
            return super().remove_permission_rule(rule_id)
        finally:
            self._rules_changed()

    def _requeue_failed(self, writer: StoreWriter) -> None:
        """Rows of batches the writer could not commit go first into the next write."""
        failed = writer.take_failed()
        if failed:
            self._pending_statements[:0] = [s for b in failed for s in b.statements]
            self._pending[:0] = [r for b in failed for r in b.rows]
            self._pending_usage[:0] = [u for b in failed for u in b.usage]
            self._pending_writes[:0] = [w for b in failed for w in b.writes]

    def flush(self) -> None:
        """Wait for the writer thread, then write what is still queued, here and now."""
        with self._conn_lock:
            self._flush()

    def _flush(self) -> None:
        writer = self._writer
        if writer is not None:
            writer.wait_idle()
            self._requeue_failed(writer)
        writes, self._pending_writes = self._pending_writes, []
        try:
            super().flush()
        except StorageFailure:
            self._pending_writes[:0] = writes
            raise
        if writes and self._journal is not None:
            self._journal.committed(writes)

    def _run(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        with self._conn_lock:
            if self.path in _LAZY and not self._depth and not self._syncing:
                self._sync()  # read your own writes, and write after them
            try:
                return self._conn.execute(sql, params)
            except sqlite3.Error as exc:
                raise StorageFailure(f"cannot use the store {self.path}: {exc}") from None

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._run(sql, params)

    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._conn_lock:
            if self.path in _LAZY and not self._depth and not self._syncing:
                self._sync()
            try:
                self._conn.executemany(sql, rows)
            except sqlite3.Error as exc:
                raise StorageFailure(f"cannot write the store {self.path}: {exc}") from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._conn_lock:
            return self._run(sql, params).fetchall()

    def _transaction(self) -> AbstractContextManager[None]:
        return _SQLiteTransaction(self)

    def _migrate(self) -> None:
        version = self._query("PRAGMA user_version")[0][0]
        if version > SCHEMA_VERSION:
            raise StorageFailure(
                f"store {self.path} has schema version {version}; this seamline reads up to {SCHEMA_VERSION}"
            )
        while version < SCHEMA_VERSION:
            with self._transaction():
                current = self._query("PRAGMA user_version")[0][0]  # another process may have migrated
                if current > version:
                    version = current
                    continue
                for statement in migration_sql(version + 1, "sqlite"):
                    self._execute(statement)
                self._execute(f"PRAGMA application_id = {APP_ID}")
                self._execute(f"PRAGMA user_version = {version + 1}")
            version += 1

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._release()

    def _release(self) -> None:
        self._closed = True
        if self._lazy_timer is not None:
            self._lazy_timer.cancel()
            self._lazy_timer = None
        with _OPEN_LOCK:
            _OPEN.discard(self)
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        journal, self._journal = self._journal, None
        if journal is not None:
            journal.close()  # what is not in the ledger stays for the next replay
        self._conn.close()
        if self._tracked:
            self._tracked = False
            track(self.path, -1)
