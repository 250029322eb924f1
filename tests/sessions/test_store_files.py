"""The store's files are opened only through its connection: tools in this process leave them alone."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from seamline.errors import SandboxViolation
from seamline.sessions.sqlite_file import is_store_file
from seamline.sessions.store import SessionStore
from seamline.tools.base import ToolContext
from seamline.tools.workspace import Workspace, workspace_tools


def test_open_store_files_are_known_until_closed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SessionStore(path)
    os.link(path, tmp_path / "hard.db")
    try:
        assert is_store_file(path) and is_store_file(f"{path}-wal") and is_store_file(f"{path}-shm")
        assert is_store_file(tmp_path / "hard.db")
        assert not is_store_file(tmp_path / "other.db")
        again = SessionStore(path)
        again.close()
        assert is_store_file(path)  # still open once
    finally:
        store.close()
    assert not is_store_file(path) and not is_store_file(f"{path}-wal")


def test_workspace_tools_never_open_the_store(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("store notes\n")
    store = SessionStore(tmp_path / "s.db")
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
