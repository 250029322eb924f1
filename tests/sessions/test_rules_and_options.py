"""Schema v4 on SQLite and PostgreSQL: permission rules and run options live in the store."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from seamline.events import ToolCall
from seamline.sessions.rules import PermissionRules, permission_service
from seamline.sessions.schema import migration_sql
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools import tool

from .conftest import StoreFactory


@tool(tool_class="execute")
def shell(command: str) -> str:
    """Run a command."""
    return command


def test_permission_rules_live_in_every_store(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store()
    rules = PermissionRules(store)
    allowed = rules.add("allow", tool="shell", pattern="command=git status")
    denied = rules.add("deny", tool="shell", pattern="command=git push*")
    assert denied.id > allowed.id
    rules.close()  # a shared store stays open
    again = make_store()
    assert [(r.effect, r.pattern) for r in PermissionRules(again).list()] == [
        ("allow", "command=git status"),
        ("deny", "command=git push*"),
    ]
    gate = permission_service(store=again, workspace=tmp_path)
    push = asyncio.run(gate.decide(shell, ToolCall(call_id="c1", name="shell", arguments={"command": "git push"})))
    status = asyncio.run(gate.decide(shell, ToolCall(call_id="c2", name="shell", arguments={"command": "git status"})))
    assert (push.allow, status.allow) == (False, True)
    assert "denied by rule" in push.reason
    assert PermissionRules(store).remove(denied.id) is True
    assert PermissionRules(store).remove(denied.id) is False
    assert [r.id for r in PermissionRules(again).list()] == [allowed.id]


def test_run_options_are_kept_with_the_session(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_session("s1", provider="offline", model=None)
    assert store.require("s1").run_options == {}
    store.set_run_options("s1", {"provider_options": {"base_url": "http://127.0.0.1:9/v1"}, "budget_usd": 0.5})
    store.set_run_options("s1", {"budget_usd": None, "allow": ["read_file"]})
    assert make_store().require("s1").run_options == {
        "provider_options": {"base_url": "http://127.0.0.1:9/v1"},
        "allow": ["read_file"],
    }


def test_a_v3_store_with_rules_beside_it_keeps_them(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for number in (1, 2, 3):
        for statement in migration_sql(number, "sqlite"):
            conn.execute(statement)
    conn.execute("PRAGMA application_id = 1397050700")
    conn.execute("PRAGMA user_version = 3")
    # the table older versions wrote through a second connection
    conn.execute(
        "CREATE TABLE permission_rules (id INTEGER PRIMARY KEY AUTOINCREMENT, effect TEXT NOT NULL, tool TEXT,"
        " tool_class TEXT, pattern TEXT, workspace TEXT, created_at REAL NOT NULL)"
    )
    conn.execute("INSERT INTO permission_rules (effect, tool, created_at) VALUES ('deny', 'shell', 1.0)")
    conn.execute(
        "INSERT INTO sessions (id, provider, status, metadata, created_at, updated_at) VALUES"
        " ('s1', 'offline', 'completed', '{}', 1.0, 1.0)"
    )
    conn.close()
    store = SQLiteStore(path)
    try:
        assert [(r.effect, r.tool) for r in PermissionRules(store).list()] == [("deny", "shell")]
        assert store.require("s1").run_options == {}
        assert PermissionRules(store).add("allow", tool="read_file").id == 2
    finally:
        store.close()
