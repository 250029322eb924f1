"""What a run costs the SQLite store in statements: the permission rules are read once and
again only when they change (here or in another process; SQLite asked at most every 10 ms), and a run's record (with its run
options), rows, figures and end share one commit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.events import ToolCall
from seamline.runner import run
from seamline.sessions import sqlite_store
from seamline.sessions.rules import PermissionRules, permission_service
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.testing import scripted
from seamline.tools import tool


@tool(tool_class="execute")
def shell(command: str) -> str:
    """Run a command."""
    return command


def _decide(store: SQLiteStore, tmp_path: Path, command: str) -> bool:
    gate = permission_service(store=store, workspace=tmp_path, yes=True)
    call = ToolCall(call_id="c", name="shell", arguments={"command": command})
    return asyncio.run(gate.decide(shell, call)).allow


def test_rules_are_read_again_only_when_they_change(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    rules = PermissionRules(store)
    rules.add("deny", tool="shell", pattern="command=rm*")
    seen: list[str] = []
    store._conn.set_trace_callback(seen.append)
    assert [_decide(store, tmp_path, "rm -rf x") for _ in range(5)] == [False] * 5
    assert (
        len([s for s in seen if s.startswith("SELECT") and "FROM permission_rules" in s]) == 1
    )  # read once, then cached
    rules.add("deny", tool="shell", pattern="command=ls*")  # a change here
    assert _decide(store, tmp_path, "ls") is False
    # a change by another process (its own connection): PRAGMA data_version moves
    code = (
        "import sys; from seamline.sessions.rules import PermissionRules; "
        "r = PermissionRules(sys.argv[1]); r.add('deny', tool='shell', pattern='command=cat*'); r.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "s.db")], check=True, timeout=60)
    assert _decide(store, tmp_path, "cat f") is False
    rules.remove(1)
    assert _decide(store, tmp_path, "rm -rf x") is True
    store._conn.set_trace_callback(None)
    assert len([s for s in seen if s.startswith("SELECT") and "FROM permission_rules" in s]) == 4
    store.close()


def test_a_run_commits_once_with_its_record_options_rows_and_end(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    on_loop: list[str] = []
    on_writer: list[str] = []
    store._conn.set_trace_callback(on_loop.append)
    store._start_writer()._conn.set_trace_callback(on_writer.append)
    script = [{"text": "done", "usage": {"input_tokens": 1}}]
    result = asyncio.run(
        run("go", provider=scripted(script), store=store, instructions="Be brief.", workspace=tmp_path, yes=True)
    )
    assert store.require(result.session_id).run_options["system_prompt"] == "Be brief."  # a read: committed first
    store._conn.set_trace_callback(None)
    writes = [s for s in on_loop + on_writer if s.startswith(("BEGIN IMMEDIATE", "UPDATE sessions SET run_options"))]
    # the record (with its options), the turn's rows, figure and end: one transaction
    assert writes == ["BEGIN IMMEDIATE"], writes
    store.close()


def test_tool_calls_within_10_ms_ask_sqlite_once_and_a_later_one_sees_another_process_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(sqlite_store, "_clock", lambda: now[0])  # the store's clock, moved by hand
    store = SQLiteStore(tmp_path / "s.db")
    asked: list[str] = []
    store._conn.set_trace_callback(asked.append)
    assert [_decide(store, tmp_path, "cat f") for _ in range(5)] == [True] * 5
    assert sum(s == "PRAGMA data_version" for s in asked) == 1  # one question for five calls
    code = (  # another process (its clock is not the one moved here)
        "import sys; from seamline.sessions.rules import PermissionRules; "
        "r = PermissionRules(sys.argv[1]); r.add('deny', tool='shell', pattern='command=cat*'); r.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "s.db")], check=True, timeout=60)
    now[0] += 0.005
    assert _decide(store, tmp_path, "cat f") is True  # within 10 ms: the rules read are current
    now[0] += 0.006
    assert _decide(store, tmp_path, "cat f") is False  # then SQLite is asked, and the rule read
    assert sum(s == "PRAGMA data_version" for s in asked) == 2
    PermissionRules(store).add("deny", tool="shell", pattern="command=ls*")  # this store's own change
    assert _decide(store, tmp_path, "ls") is False  # applies at once
    beside = SQLiteStore(tmp_path / "s.db")  # another store of this process, on its own connection
    PermissionRules(beside).add("deny", tool="shell", pattern="command=echo*")
    assert _decide(store, tmp_path, "echo hi") is False  # at once too
    beside.close()
    store._conn.set_trace_callback(None)
    store.close()
