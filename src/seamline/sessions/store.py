"""The embedded SQLite store: session records and the append-only raw log.

The raw log holds every input and output of a session as the provider sent it (or, for
providers without a wire of their own, as the event it produced). Rows are buffered in
memory and written in one transaction at step boundaries and always before a turn's
``complete`` is handed to the caller, so a finished turn is on disk.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from seamline.errors import InvalidRequest

__all__ = ["RawRow", "SessionRecord", "SessionStore", "SessionStatus", "default_store_path"]

SessionStatus = Literal["open", "completed", "failed", "aborted", "interrupted", "budget"]
Direction = Literal["in", "out"]

STORE_ENV: Final = "SEAMLINE_STORE"
_APP_ID: Final = 0x53454D4C  # "SEML": marks a file as ours, so a foreign one is never touched
_SCHEMA_VERSION: Final = 1

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    model TEXT,
    provider_session_id TEXT,
    parent_id TEXT,
    workspace TEXT,
    mode TEXT NOT NULL DEFAULT 'agent',
    status TEXT NOT NULL DEFAULT 'open',
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS raw_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    turn INTEGER NOT NULL,
    direction TEXT NOT NULL,
    source TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS raw_log_session ON raw_log(session_id, seq);
"""


def default_store_path() -> Path:
    """``$SEAMLINE_STORE``, else ``store.db`` under the user's data directory."""
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "seamline" / "store.db"


@dataclass(frozen=True, slots=True)
class SessionRecord:
    id: str
    provider: str
    model: str | None
    provider_session_id: str | None
    parent_id: str | None
    workspace: str | None
    mode: str
    status: str
    metadata: dict[str, Any]
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class RawRow:
    seq: int
    session_id: str
    turn: int
    direction: str
    source: str
    payload: str
    created_at: float = field(default=0.0)


class SessionStore:
    """Sessions and their raw log in one SQLite file.

    >>> store = SessionStore(":memory:")
    >>> store.create_session("s1", provider="offline", model="extractive")
    >>> store.get("s1").status
    'open'
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self._pending: list[tuple[str, int, str, str, str, float]] = []
        self._conn = self._connect(self.path)

    @staticmethod
    def _connect(path: str) -> sqlite3.Connection:
        if path != ":memory:":
            target = Path(path)
            if target.is_dir():
                raise InvalidRequest(f"store path {path} is a directory, not a file")
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InvalidRequest(f"cannot create the store's folder {target.parent}: {exc.strerror}") from None
            if target.exists():
                _check_ours(target)
            elif not os.access(target.parent, os.W_OK):
                raise InvalidRequest(f"cannot write the store {path}: folder is not writable")
        try:
            conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 30000")
            if path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                conn.executescript(
                    f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA application_id = {_APP_ID};"
                    f" PRAGMA user_version = {_SCHEMA_VERSION}; COMMIT;"
                )
            elif version > _SCHEMA_VERSION:
                raise InvalidRequest(
                    f"store {path} has schema version {version}; this seamline reads up to {_SCHEMA_VERSION}"
                )
        except sqlite3.DatabaseError as exc:
            raise InvalidRequest(f"cannot open the store {path}: {exc}") from None
        return conn

    # -- sessions -------------------------------------------------------------------------
    def create_session(
        self,
        session_id: str,
        *,
        provider: str,
        model: str | None,
        parent_id: str | None = None,
        workspace: str | None = None,
        mode: str = "agent",
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        now = time.time()
        self._write(
            "INSERT INTO sessions (id, provider, model, parent_id, workspace, mode, status, metadata,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'open', ?, ?, ?)",
            (session_id, provider, model, parent_id, workspace, mode, json.dumps(dict(metadata or {})), now, now),
        )

    def set_provider_session_id(self, session_id: str, provider_session_id: str) -> None:
        self._write(
            "UPDATE sessions SET provider_session_id = ?, updated_at = ? WHERE id = ?",
            (provider_session_id, time.time(), session_id),
        )

    def set_status(self, session_id: str, status: SessionStatus) -> None:
        self._write("UPDATE sessions SET status = ?, updated_at = ? WHERE id = ?", (status, time.time(), session_id))

    def get(self, session_id: str) -> SessionRecord | None:
        row = self._conn.execute(
            "SELECT id, provider, model, provider_session_id, parent_id, workspace, mode, status, metadata,"
            " created_at, updated_at FROM sessions WHERE id = ?",
            (session_id,),
        ).fetchone()
        return None if row is None else _record(row)

    def list_sessions(self, *, limit: int = 100) -> list[SessionRecord]:
        rows = self._conn.execute(
            "SELECT id, provider, model, provider_session_id, parent_id, workspace, mode, status, metadata,"
            " created_at, updated_at FROM sessions ORDER BY created_at DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [_record(r) for r in rows]

    # -- raw log ----------------------------------------------------------------------------
    def append_raw(self, session_id: str, turn: int, direction: Direction, source: str, payload: str) -> None:
        """Queue one raw row; :meth:`flush` writes the queue in one transaction."""
        self._pending.append((session_id, turn, direction, source, payload, time.time()))

    def flush(self) -> None:
        if not self._pending:
            return
        rows, self._pending = self._pending, []
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany(
                "INSERT INTO raw_log (session_id, turn, direction, source, payload, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            self._pending[:0] = rows  # keep them: a later flush may succeed
            raise InvalidRequest(f"cannot write the store {self.path}: {exc}") from None

    def raw_rows(self, session_id: str) -> Iterator[RawRow]:
        cursor = self._conn.execute(
            "SELECT seq, session_id, turn, direction, source, payload, created_at FROM raw_log"
            " WHERE session_id = ? ORDER BY seq",
            (session_id,),
        )
        for row in cursor:
            yield RawRow(*row)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._conn.close()

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        try:
            self._conn.execute(sql, params)
        except sqlite3.Error as exc:
            raise InvalidRequest(f"cannot write the store {self.path}: {exc}") from None

    def _rollback(self) -> None:
        try:
            self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _record(row: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(
        id=row[0],
        provider=row[1],
        model=row[2],
        provider_session_id=row[3],
        parent_id=row[4],
        workspace=row[5],
        mode=row[6],
        status=row[7],
        metadata=json.loads(row[8]),
        created_at=row[9],
        updated_at=row[10],
    )


def _check_ours(target: Path) -> None:
    """Refuse a file that is not a seamline store; never write into a foreign file."""
    try:
        with target.open("rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise InvalidRequest(f"cannot read the store {target}: {exc.strerror}") from None
    if len(header) == 0:
        return  # an empty file: a fresh store
    if not header.startswith(b"SQLite format 3\x00") or len(header) < 100:
        raise InvalidRequest(f"{target} is not a seamline store (not an SQLite database); refusing to touch it")
    app_id = int.from_bytes(header[68:72], "big")
    if app_id not in (0, _APP_ID):
        raise InvalidRequest(f"{target} is an SQLite database of another program; refusing to touch it")
    if app_id == 0:
        user_version = int.from_bytes(header[60:64], "big")
        if user_version != 0:
            raise InvalidRequest(f"{target} is an SQLite database of another program; refusing to touch it")
        # An SQLite file with tables but none of ours is foreign too.
        try:
            conn = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
            try:
                names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            raise InvalidRequest(f"{target} is not a readable seamline store: {exc}") from None
        if names and not {"sessions", "raw_log"} <= names:
            raise InvalidRequest(f"{target} is an SQLite database of another program; refusing to touch it")
