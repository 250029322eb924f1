"""The store's files are opened only through its connection: tools in this process leave them alone."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from seamline.errors import SandboxViolation, StorageFailure
from seamline.sessions import sqlite_file
from seamline.sessions.sqlite_file import is_store_file
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools.base import ToolContext
from seamline.tools.workspace import Workspace, workspace_tools


def test_open_store_files_are_known_until_closed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    os.link(path, tmp_path / "hard.db")
    try:
        assert is_store_file(path) and is_store_file(f"{path}-wal") and is_store_file(f"{path}-shm")
        assert is_store_file(tmp_path / "hard.db")
        assert not is_store_file(tmp_path / "other.db")
        again = SQLiteStore(path)
        again.close()
        assert is_store_file(path)  # still open once
    finally:
        store.close()
    assert not is_store_file(path) and not is_store_file(f"{path}-wal")


def test_workspace_tools_never_open_the_store(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("store notes\n")
    store = SQLiteStore(tmp_path / "s.db")
    store.create_session("s1", provider="offline", model=None)
    store.flush()
    tools = workspace_tools(Workspace(tmp_path))
    ctx = ToolContext(call_id="c1", session_id="s1", turn_id=1, emit=lambda event: None)

    def call(name: str, **arguments: str) -> str:
        found = tools.get(name)
        assert found is not None
        return asyncio.run(found.invoke(arguments, ctx))

    try:
        with pytest.raises(SandboxViolation, match="open session store"):
            call("read_file", path="s.db")
        with pytest.raises(SandboxViolation, match="open session store"):
            call("grep", pattern="s", path="s.db-wal")
        found = call("grep", pattern=".*")
        assert "notes.txt" in found and "s.db" not in found
    finally:
        store.close()


class _LockedAtFirst(sqlite3.Connection):
    """A connection whose first switches to WAL find the file locked, as a store opened by
    many processes at once can (SQLite answers SQLITE_BUSY there without its busy handler)."""

    refusals = 0

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if "journal_mode" in sql and _LockedAtFirst.refusals > 0:
            _LockedAtFirst.refusals -= 1
            raise sqlite3.OperationalError("database is locked")
        return super().execute(sql, *args)


def test_a_store_locked_for_a_moment_at_open_is_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect = sqlite3.connect
    opened: list[sqlite3.Connection] = []

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real_connect(*args, factory=_LockedAtFirst, **kwargs)
        opened.append(conn)
        return conn

    monkeypatch.setattr(sqlite_file.sqlite3, "connect", connect)
    monkeypatch.setattr(_LockedAtFirst, "refusals", 3)
    store = SQLiteStore(tmp_path / "s.db")
    try:
        store.create_session("s1", provider="offline", model=None)
        store.flush()
        assert [s.id for s in store.list_sessions()] == ["s1"]
    finally:
        store.close()
    assert _LockedAtFirst.refusals == 0 and len(opened) == 1  # refused three times, then switched


def test_a_store_that_stays_locked_is_a_classified_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect = sqlite3.connect
    monkeypatch.setattr(sqlite_file.sqlite3, "connect", lambda *a, **k: real_connect(*a, factory=_LockedAtFirst, **k))
    monkeypatch.setattr(_LockedAtFirst, "refusals", 10**6)
    monkeypatch.setattr(sqlite_file, "_OPEN_RETRY_S", 0.3)
    with pytest.raises(StorageFailure, match=r"cannot open the store .*s\.db: database is locked"):
        SQLiteStore(tmp_path / "s.db")
    assert not is_store_file(tmp_path / "s.db")


class _MigratedMidCheck(sqlite3.Connection):
    """A connection that lets another process's first migration commit right after its
    first read of the file's header, as 40 runs starting on one new store can."""

    other: sqlite3.Connection | None = None

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = super().execute(sql, *args)
        other, _MigratedMidCheck.other = _MigratedMidCheck.other, None
        if other is not None and sql == "PRAGMA application_id":
            other.executescript(
                f"BEGIN; CREATE TABLE sessions (id TEXT); CREATE TABLE raw_log (id TEXT);"
                f" PRAGMA application_id = {sqlite_file.APP_ID}; PRAGMA user_version = 1; COMMIT;"
            )
        elif other is not None:
            _MigratedMidCheck.other = other
        return cursor


def test_a_store_migrated_by_another_process_mid_check_is_ours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.db"
    other = sqlite3.connect(path, isolation_level=None)
    try:
        assert other.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"  # readers never block it
        real_connect = sqlite3.connect
        monkeypatch.setattr(
            sqlite_file.sqlite3, "connect", lambda *a, **k: real_connect(*a, factory=_MigratedMidCheck, **k)
        )
        monkeypatch.setattr(_MigratedMidCheck, "other", other)
        conn = sqlite_file.connect(str(path), create_folder=False)
        try:
            assert _MigratedMidCheck.other is None  # the other migration did land mid-check
            assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        finally:
            conn.close()
    finally:
        other.close()
