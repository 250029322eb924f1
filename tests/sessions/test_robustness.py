"""Crashes, concurrent writers, migrations and the sessions CLI, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seamline.errors import StorageFailure
from seamline.sessions.schema import SCHEMA_VERSION, migration_sql
from seamline.sessions.sqlite_store import open_store
from tests.sessions.conftest import StoreFactory

WRITER = """
import asyncio, sys
from seamline.sessions.sqlite_store import open_store
from seamline.testing import scripted
from seamline.tools import Toolset, tool

@tool
def lookup(key: str) -> str:
    '''Look up.'''
    return key

async def main(location, tag, n):
    store = open_store(location)
    for i in range(n):
        script = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}], "usage": {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.001}},
                  {"text": f"{tag}-{i}", "usage": {"input_tokens": 1, "output_tokens": 1, "cost_usd": 0.001}}]
        session = await scripted(script).open(store=store, tools=Toolset([lookup]), metadata={"tag": tag})
        events = [e async for e in session.send("go")]
        assert events[-1].outcome == "completed", events[-1]
    store.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def test_two_processes_on_one_store(
    store_location: str, make_store: StoreFactory, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    make_store()  # create (and migrate) it first, as a user's first run would
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = dict(cli_env, PYTHONPATH=cli_env["PYTHONPATH"])
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), store_location, tag, "40"], env=env, stderr=subprocess.PIPE, text=True
        )
        for tag in ("a", "b")
    ]
    try:
        outs = [p.communicate(timeout=240)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs
    assert not any("locked" in o for o in outs)
    store = make_store()
    sessions = store.list_sessions(limit=1000)
    assert sorted(s.metadata["tag"] for s in sessions) == ["a"] * 40 + ["b"] * 40
    assert all(s.status == "completed" for s in sessions)
    assert sum(len(store.usage_rows(s.id)) for s in sessions) == 160


SLOW_SCRIPT = """
- text: before the crash
  tool_calls: [{name: list_dir, arguments: {path: "."}}]
  usage: {input_tokens: 50, output_tokens: 5, cost_usd: 0.5}
- delay: 60
  text: never
"""


def test_sigkill_mid_turn_leaves_an_interrupted_resumable_session(
    store_location: str, make_store: StoreFactory, tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    script = tmp_path / "slow.yaml"
    script.write_text(SLOW_SCRIPT)
    observer = make_store()
    proc = subprocess.Popen(
        [*seamline_cmd, "run", "--json", "--store", store_location, "-p", "scripted", "-o", f"script={script}", "go"],
        env=cli_env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        sid = None
        while time.monotonic() < deadline:
            sessions = observer.list_sessions()
            if sessions and observer.usage_rows(sessions[0].id):
                sid = sessions[0].id
                break
            time.sleep(0.05)
        assert sid is not None, "the run never recorded its first usage"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    after = make_store()  # opening the store notices the dead owner
    record = after.get(sid)
    assert record is not None and record.status == "interrupted"
    assert [u.cost_usd for u in after.usage_rows(sid)] == [0.5]
    payloads = " ".join(r.payload for r in after.raw_rows(sid))
    assert "before the crash" in payloads and "list_dir" in payloads
    again = tmp_path / "again.yaml"
    again.write_text("- text: resumed fine\n")
    done = subprocess.run(
        [
            *seamline_cmd,
            "sessions",
            "resume",
            sid,
            "--store",
            store_location,
            "-o",
            f"script={again}",
            "--json",
            "go on",
        ],
        env=cli_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["text"] == "resumed fine"
    assert make_store().get(sid).status == "completed"  # type: ignore[union-attr]


def test_sqlite_v1_store_is_migrated_with_its_data(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for statement in migration_sql(1, "sqlite"):
        conn.execute(statement)
    conn.execute("INSERT INTO sessions (id, provider, created_at, updated_at) VALUES ('old', 'offline', 1, 1)")
    conn.execute(
        "INSERT INTO raw_log (session_id, turn, direction, source, payload, created_at)"
        " VALUES ('old', 1, 'in', 'prompt', '\"hi\"', 1)"
    )
    conn.execute("PRAGMA application_id = 1397050700")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    store = open_store(path)
    assert store.get("old") is not None
    assert [e.content for e in store.transcript("old")] == ["hi"]
    assert store.totals("old").sessions == 1
    store.close()
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    check.close()


def test_a_newer_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    open_store(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.commit()
    conn.close()
    with pytest.raises(StorageFailure, match="reads up to"):
        open_store(path)


def test_postgres_migrates_from_v1_and_refuses_foreign(postgres_url: str) -> None:
    import psycopg

    from tests.sessions.conftest import fresh_database

    url = fresh_database(postgres_url)
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in migration_sql(1, "postgres"):
            conn.execute(statement)
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (1)")
        conn.execute("INSERT INTO sessions (id, provider, created_at, updated_at) VALUES ('old', 'offline', 1, 1)")
    store = open_store(url)
    assert store.get("old") is not None and store.totals("old").cost_usd == 0
    store.close()
    foreign = fresh_database(postgres_url)
    with psycopg.connect(foreign, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id INT)")
        conn.execute("CREATE TABLE customers (id INT)")
    with pytest.raises(StorageFailure, match="another program"):
        open_store(foreign)
    with pytest.raises(StorageFailure, match="cannot connect"):
        open_store("postgresql://nobody:secret-pw@127.0.0.1:1/none")
    try:
        open_store("postgresql://nobody:secret-pw@127.0.0.1:1/none")
    except StorageFailure as exc:
        assert "secret-pw" not in str(exc)


def test_sessions_cli(store_location: str, tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    def sl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*seamline_cmd, *args, "--store", store_location],
            env=cli_env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    first = tmp_path / "first.yaml"
    first.write_text(
        "- tool_calls: [{name: read_file, arguments: {path: first.yaml}}]\n"
        "  usage: {input_tokens: 10, output_tokens: 1, cost_usd: 0.25}\n- text: read it\n"
    )
    done = subprocess.run(
        [*seamline_cmd, "run", "--json", "--store", store_location, "-p", "scripted", "-o", f"script={first}", "read"],
        env=cli_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    sid = json.loads(done.stdout.splitlines()[0])["session_id"]
    listed = [json.loads(x) for x in sl("sessions", "list", "--json").stdout.splitlines()]
    assert [r["id"] for r in listed] == [sid] and listed[0]["status"] == "completed"
    shown = json.loads(sl("sessions", "show", sid[:8], "--json").stdout)
    assert shown["files"] == [{"path": "first.yaml", "kinds": ["read"], "call_ids": [shown["files"][0]["call_ids"][0]]}]
    assert shown["totals"]["cost"] == "$0.2500"
    follow = tmp_path / "follow.yaml"
    follow.write_text("- text: continued\n")
    resumed = sl("sessions", "resume", sid, "-o", f"script={follow}", "--json", "more")
    assert resumed.returncode == 0 and json.loads(resumed.stdout.splitlines()[-1])["text"] == "continued"
    via_run = subprocess.run(
        [
            *seamline_cmd,
            "run",
            "--session",
            sid,
            "--store",
            store_location,
            "-o",
            f"script={follow}",
            "--json",
            "again",
        ],
        env=cli_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert via_run.returncode == 0, via_run.stderr
    forked = sl("sessions", "fork", sid, "--at", "0", "-o", f"script={follow}", "--json", "--prompt", "forked")
    assert forked.returncode == 0, forked.stderr
    fork_sid = json.loads(forked.stdout.splitlines()[0])["session_id"]
    exported = json.loads(sl("sessions", "export", sid).stdout)
    assert {"session", "raw_log", "usage", "transcript"} <= set(exported)
    assert [e["content"] for e in exported["transcript"] if e["kind"] == "user"] == ["read", "more", "again"]
    tree = json.loads(sl("sessions", "show", sid, "--json").stdout)
    assert tree["descendants"] == [fork_sid]
    removed = sl("sessions", "rm", fork_sid, "--json")
    assert json.loads(removed.stdout) == {"removed": fork_sid}
    missing = sl("sessions", "show", "ffffffffffff")
    assert missing.returncode == 2 and missing.stderr.startswith("seamline: invalid_request error: no session")
