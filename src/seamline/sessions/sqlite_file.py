"""The SQLite store's file: one connection opens it, and this process never opens it otherwise.

SQLite keeps POSIX advisory locks on the file; closing *any* descriptor of it in this
process drops them all, after which concurrent writers corrupt the database. So the file
is vetted through the store's own connection (never a plain ``open()`` or a probe
connection), and the files of every open store are tracked so that tools and the edit
journal leave them alone (:func:`is_store_file`).
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from pathlib import Path
from typing import Final

from seamline.errors import InvalidRequest, StorageFailure
from seamline.store_files import is_store_file, track

__all__ = ["APP_ID", "connect", "is_store_file", "track"]

APP_ID: Final = 0x53454D4C  # "SEML": marks a file as ours, so a foreign one is never touched

# How long opening waits on a store another process holds locked while it switches to WAL.
_OPEN_RETRY_S = 30.0


def connect(path: str, *, create_folder: bool) -> sqlite3.Connection:
    """One connection to the store file; the file is only ever opened through it (a plain
    ``open()`` of the file, or a second connection closed later, would drop this process's
    POSIX locks on it and let concurrent writers corrupt the database)."""
    if path != ":memory:":
        target = Path(path)
        if target.is_dir():
            raise InvalidRequest(f"store path {path} is a directory, not a file")
        if not target.parent.is_dir():
            if not create_folder:
                raise InvalidRequest(f"the store's folder {target.parent} does not exist; create it first")
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageFailure(f"cannot create the store's folder {target.parent}: {exc.strerror}") from None
        if not target.exists() and not os.access(target.parent, os.W_OK):
            raise StorageFailure(f"cannot write the store {path}: folder is not writable")
    try:
        conn = sqlite3.connect(path, timeout=60.0, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StorageFailure(f"cannot open the store {path}: {exc}") from None
    try:
        conn.execute("PRAGMA busy_timeout = 60000")
        _check_ours(conn, path)  # before anything is written to the file
        if path != ":memory:":
            _switch_to_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StorageFailure(f"cannot open the store {path}: {exc}") from None
    except StorageFailure:
        conn.close()
        raise
    return conn


def _switch_to_wal(conn: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode = WAL``, again while the file is locked for a moment.

    Many processes opening one store at once can find it locked here (one of them is
    converting a new file to WAL) and SQLite answers SQLITE_BUSY at once, without waiting
    on its busy handler; so wait here, up to ``_OPEN_RETRY_S``, then fail as before."""
    deadline = time.monotonic() + _OPEN_RETRY_S
    pause = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", None)
            if not ((busy is not None and busy & 0xFF == sqlite3.SQLITE_BUSY) or "database is locked" in str(exc)):
                raise
            if time.monotonic() >= deadline:
                raise
        time.sleep(pause * (0.5 + random.random()))
        pause = min(pause * 2, 0.2)


def _check_ours(conn: sqlite3.Connection, path: str) -> None:
    """Refuse a file that is not a seamline store; never write into a foreign file. Reads
    through the store's own connection only, in one read transaction: another process's
    first migration sets all three at once, and reads on either side of its commit would
    take a store being created for another program's file."""
    try:
        conn.execute("BEGIN")
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            user_version = conn.execute("PRAGMA user_version").fetchone()[0]
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc) or "malformed" in str(exc):
            raise StorageFailure(
                f"{path} is not a seamline store (not an SQLite database); refusing to touch it"
            ) from None
        raise StorageFailure(f"{path} is not a readable seamline store: {exc}") from None
    if app_id not in (0, APP_ID):
        raise StorageFailure(f"{path} is an SQLite database of another program; refusing to touch it")
    if app_id == 0 and (user_version != 0 or (names and not {"sessions", "raw_log"} <= names)):
        raise StorageFailure(f"{path} is an SQLite database of another program; refusing to touch it")
