"""The workspace scan of the edit journal never reads an open store's files (reading one
outside SQLite drops this process's locks on it): the database, its WAL and shared memory,
its usage journals, a hard link to it and a symbolic link to it are all left out."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

from seamline.events import Usage
from seamline.sandbox.file_index import FileIndex
from seamline.sessions.sqlite_store import SQLiteStore


def test_a_scan_leaves_every_file_of_an_open_store_out(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "notes.txt").write_text("notes\n")
    store = SQLiteStore(ws / "sub" / "s.db")
    try:
        store.create_session("s1", provider="offline", model=None)
        asyncio.run(store.record_usage_grouped("s1", 1, Usage(input_tokens=1)))  # a usage journal
        assert (ws / "sub" / "s.db-wal").exists() and list((ws / "sub" / "s.db.usage").iterdir())
        os.link(ws / "sub" / "s.db", ws / "hard.db")
        (ws / "soft.db").symlink_to(ws / "sub" / "s.db")
        db = sqlite3.connect(":memory:")
        db.execute("CREATE TABLE blobs (hash TEXT PRIMARY KEY, data BLOB NOT NULL)")  # the journal's table
        index = FileIndex(db)
        found = index.scan(str(ws), None, skip="edits", max_bytes=1 << 20)
    finally:
        store.close()
    assert "notes.txt" in found and "sub" in found
    left_out = {"sub/s.db", "sub/s.db-wal", "sub/s.db-shm", "sub/s.db.usage", "hard.db", "soft.db"}
    assert not left_out & set(found), sorted(found)
    assert index.hashed_files == 1  # notes.txt only: no store file was opened
