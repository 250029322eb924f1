"""The SQLite store: records, raw log, where it lives, and refusing what is not ours."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest, StorageFailure
from seamline.sessions.sqlite_store import SQLiteStore, default_store_path


def test_records_and_raw_log_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    store.create_session("s1", provider="offline", model="extractive", workspace="/w", metadata={"k": 1})
    store.append_raw("s1", 1, "in", "prompt", '"hi"')
    store.append_raw("s1", 1, "out", "event", '{"type":"text","text":"yo"}')
    store.set_provider_session_id("s1", "native")
    store.set_status("s1", "completed")
    store.close()
    again = SQLiteStore(path)
    record = again.get("s1")
    assert record is not None
    assert (record.provider, record.model, record.provider_session_id, record.status, record.metadata) == (
        "offline",
        "extractive",
        "native",
        "completed",
        {"k": 1},
    )
    rows = list(again.raw_rows("s1"))
    assert [(r.direction, r.source, r.payload) for r in rows] == [
        ("in", "prompt", '"hi"'),
        ("out", "event", '{"type":"text","text":"yo"}'),
    ]
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)
    assert [s.id for s in again.list_sessions()] == ["s1"]


def test_default_location_and_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SEAMLINE_STORE", str(tmp_path / "env.db"))
    assert default_store_path() == tmp_path / "env.db"
    monkeypatch.delenv("SEAMLINE_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "seamline" / "store.db"


def test_corrupt_file_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database at all" * 10)
    before = path.read_bytes()
    with pytest.raises(StorageFailure, match="not a seamline store"):
        SQLiteStore(path)
    assert path.read_bytes() == before


def test_foreign_sqlite_database_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StorageFailure, match="another program"):
        SQLiteStore(path)
    assert path.read_bytes() == before


@pytest.mark.skipif(
    os.geteuid() == 0, reason="not on this machine: root writes anywhere; the folder case below covers root"
)
def test_unwritable_folder_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    with pytest.raises(StorageFailure, match="not writable"):
        SQLiteStore(folder / "s.db")


def test_unusable_store_paths_are_clear_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StorageFailure, match="cannot create the store's folder"):
        SQLiteStore(blocker / "sub" / "s.db", create_folder=True)
    with pytest.raises(InvalidRequest, match=r"folder .* does not exist"):
        SQLiteStore(tmp_path / "missing" / "s.db")
    assert not (tmp_path / "missing").exists()
    with pytest.raises(InvalidRequest, match="is a directory"):
        SQLiteStore(tmp_path)


def test_failed_flush_keeps_rows_for_a_later_flush(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store.create_session("s1", provider="p", model=None)
    store.append_raw("s1", 1, "in", "prompt", '"a"')
    blocker = sqlite3.connect(tmp_path / "s.db", timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")
    store._conn.execute("PRAGMA busy_timeout = 50")
    with pytest.raises(StorageFailure, match=r"cannot (use|write) the store"):
        store.flush()
    blocker.rollback()
    blocker.close()
    store.flush()
    assert [r.payload for r in store.raw_rows("s1")] == ['"a"']
