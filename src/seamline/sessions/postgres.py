"""The store on a PostgreSQL server, for teams sharing one (``pip install 'seamline[postgres]'``).

Same interface and schema as the SQLite store; open it with
``open_store("postgresql://user@host/db")`` or ``--store postgresql://…``. Writes run in
short transactions; the schema is migrated under an advisory lock, so several processes
can open the same database at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final

from seamline.errors import InvalidRequest, StorageFailure
from seamline.extras import install_hint
from seamline.redact import redact_url
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.schema import SCHEMA_VERSION, migration_sql

__all__ = ["PostgresStore"]

_LOCK_KEY: Final = 0x53454D4C


def _redact(url: str) -> str:
    """The URL without its password, for messages."""
    return redact_url(url)


CHANNEL: Final = "seamline_sessions"
"""What a PostgreSQL store NOTIFYs when a write opens, ends or changes a session (see
:mod:`seamline.sessions.changes`)."""


class PostgresStore(SessionStore):
    """Sessions, raw log, ledger and transcript in a PostgreSQL database."""

    dialect = "postgres"

    def __init__(self, url: str) -> None:
        super().__init__()
        self.location = _redact(url)
        try:
            import psycopg
        except ImportError:
            raise InvalidRequest(f"a PostgreSQL store needs psycopg: {install_hint('postgres')}") from None
        self._psycopg = psycopg
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StorageFailure(f"cannot connect to the store {self.location}: {_first_line(exc)}") from None
        self._lock = threading.RLock()
        self._depth = 0
        self._migrate()
        self.recover_interrupted()

    def _sql(self, sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s")

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        try:
            self._conn.execute(self._sql(sql), tuple(params))
        except self._psycopg.Error as exc:
            raise StorageFailure(f"cannot use the store {self.location}: {_first_line(exc)}") from None

    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        try:
            with self._conn.cursor() as cur:
                cur.executemany(self._sql(sql), [tuple(r) for r in rows])
        except self._psycopg.Error as exc:
            raise StorageFailure(f"cannot write the store {self.location}: {_first_line(exc)}") from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return list(self._conn.execute(self._sql(sql), tuple(params)).fetchall())
        except self._psycopg.Error as exc:
            raise StorageFailure(f"cannot read the store {self.location}: {_first_line(exc)}") from None

    def _run_statements(self, statements: Sequence[tuple[str, tuple[Any, ...]]], *, before_rows: bool) -> None:
        super()._run_statements(statements, before_rows=before_rows)
        if statements and not before_rows:
            # A session opened or its status changed (not each usage figure: readers see those
            # on their own tick): LISTENers (seamline watch) are told at this commit.
            self._execute(f"SELECT pg_notify('{CHANNEL}', '')")

    def _transaction(self) -> AbstractContextManager[None]:
        return self._tx()

    @contextmanager
    def _tx(self) -> Iterator[None]:
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            self._depth = 1
            try:
                with self._conn.transaction():
                    yield
            except self._psycopg.Error as exc:
                raise StorageFailure(f"cannot write the store {self.location}: {_first_line(exc)}") from None
            finally:
                self._depth = 0

    def _migrate(self) -> None:
        with self._transaction():
            self._execute("SELECT pg_advisory_xact_lock(?)", (_LOCK_KEY,))
            self._execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            rows = self._query("SELECT version FROM schema_version")
            version = rows[0][0] if rows else 0
            if version > SCHEMA_VERSION:
                raise StorageFailure(
                    f"store {self.location} has schema version {version}; this seamline reads up to {SCHEMA_VERSION}"
                )
            if not rows:
                tables = self._query(
                    "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()"
                )
                if tables[0][0] > 1:
                    raise StorageFailure(f"{self.location} holds another program's tables; refusing to touch it")
                self._execute("INSERT INTO schema_version (version) VALUES (0)")
            while version < SCHEMA_VERSION:
                version += 1
                for statement in migration_sql(version, "postgres"):
                    self._execute(statement)
                self._execute("UPDATE schema_version SET version = ?", (version,))

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._conn.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
