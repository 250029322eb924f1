"""Session stores: the record of every session, its raw log, cost ledger and transcript.

:class:`SQLiteStore` is the embedded SQLite store (the default); ``PostgresStore`` in
:mod:`seamline.sessions.postgres` is the same interface on a PostgreSQL server, for
teams sharing a store. :func:`open_store` picks one from a path or a ``postgresql://`` URL.

Raw-log rows are buffered and written in one transaction at each usage figure (once per
model call), and always before a turn's ``complete`` is handed to the caller; usage
figures are committed before they reach the caller, so a crash keeps what was spent. On
SQLite those commits run on the store's writer thread (:mod:`seamline.sessions.writer`),
shared by every run of the event loop: the loop never waits on SQLite.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from seamline.errors import InvalidRequest, StorageFailure
from seamline.locations import STORE_ENV, default_store_path
from seamline.sessions.core import SessionStore
from seamline.sessions.records import (
    RawRow,
    SessionRecord,
)
from seamline.sessions.schema import SCHEMA_VERSION, Dialect, migration_sql
from seamline.sessions.sqlite_file import APP_ID, connect, is_store_file, track
from seamline.sessions.writer import Batch, StoreWriter

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
        if store._depth == 0:
            store._run("BEGIN IMMEDIATE")
        store._depth += 1

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        store = self._store
        store._depth -= 1
        if store._depth == 0:
            store._run("ROLLBACK" if kind is not None else "COMMIT")


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
        try:
            self._migrate()
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
        if writer is None or writer.idle():
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
        batch = Batch(self._pending_statements, self._pending, self._pending_usage)
        self._pending_statements, self._pending, self._pending_usage = [], [], []
        if waiter is not None:
            batch.loop, batch.future = waiter.get_loop(), waiter
        try:
            writer.submit(batch)
        except StorageFailure as exc:
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)

    def _start_writer(self) -> StoreWriter:
        if self._writer is None:
            self._writer = StoreWriter(self.path)
        return self._writer

    def _requeue_failed(self, writer: StoreWriter) -> None:
        """Rows of batches the writer could not commit go first into the next write."""
        failed = writer.take_failed()
        if failed:
            self._pending_statements[:0] = [s for b in failed for s in b.statements]
            self._pending[:0] = [r for b in failed for r in b.rows]
            self._pending_usage[:0] = [u for b in failed for u in b.usage]

    def flush(self) -> None:
        """Wait for the writer thread, then write what is still queued, here and now."""
        writer = self._writer
        if writer is not None:
            writer.wait_idle()
            self._requeue_failed(writer)
        super().flush()

    def _run(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, params)
        except sqlite3.Error as exc:
            raise StorageFailure(f"cannot use the store {self.path}: {exc}") from None

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._run(sql, params)

    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        try:
            self._conn.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise StorageFailure(f"cannot write the store {self.path}: {exc}") from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
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
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        self._conn.close()
        if self._tracked:
            self._tracked = False
            track(self.path, -1)
