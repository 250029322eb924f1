"""The store's POSIX locks survive what else the process does with the workspace.

SQLite holds advisory (fcntl) locks on the database file, and closing *any* descriptor of
that file in the process drops them all; concurrent writers then corrupt the database.
So while a store is open, the read tools and the edit journal's scan must never open its
files. This is the deterministic form of tests/cli/test_store_parallel.py (which needs a
race to go wrong): this process holds a write lock, runs the tools over a workspace with
the store in it, and a second process checks that the lock still holds.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import seamline
from seamline.sandbox.journal import EditJournal
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.testing import scripted

PROBE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=0)
try:
    conn.execute("BEGIN IMMEDIATE")
except sqlite3.OperationalError as exc:
    print("held:", exc)
else:
    print("taken")
"""


def _lock_still_held(db: Path) -> bool:
    done = subprocess.run([sys.executable, "-c", PROBE, str(db)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.startswith("held:")


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A workspace with an open store in it, and a write lock on the store held by this process."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("the store keeps every session and its usage\n")
    db = ws / "shared.db"
    store = SQLiteStore(db)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    assert _lock_still_held(db)  # the probe sees a held lock as held
    yield ws, db
    holder.execute("ROLLBACK")
    holder.close()
    store.close()


def test_the_read_tools_leave_the_stores_locks_alone(locked: tuple[Path, Path]) -> None:
    ws, db = locked
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "grep", "arguments": {"pattern": "usage"}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "shared.db"}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "shared.db-shm"}}]},
        {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"text": "ok"},
    ]
    result = seamline.run_sync("look", provider=scripted(script), workspace=ws, store=None)
    assert result.outcome == "completed", result.events
    outputs = [e.output for e in result.events if e.type == "tool_result"]
    assert "notes.txt" in outputs[0] and "shared.db" not in outputs[0]  # grep passed the store by
    assert all("the open session store; tools never open it" in out for out in outputs[1:3]), outputs
    assert _lock_still_held(db)


def test_the_journal_scan_leaves_the_stores_locks_alone(locked: tuple[Path, Path], tmp_path: Path) -> None:
    ws, db = locked
    journal = EditJournal(tmp_path / "other.edits.db")
    try:
        with journal.track(run_id="r", workspace=ws, tool="shell", call_id="c1"):
            (ws / "made.txt").write_text("new\n")
        steps = journal.steps("r")
    finally:
        journal.close()
    assert set(steps[0].paths) == {"made.txt"}
    assert _lock_still_held(db)
