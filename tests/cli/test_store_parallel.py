"""Many `seamline run` processes on one SQLite store at once: the store stays whole.

Opening and closing the store file outside its SQLite connection drops the process's POSIX
locks on it; then concurrent writers corrupt the database or lose rows. Two such openers
are covered: building the permission rules, and the read tools (here `grep`) when the
store lies inside the workspace.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path

RUNS = 40
GREP_THEN_ANSWER = (
    '[{"tool_calls": [{"name": "grep", "arguments": {"pattern": "usage"}}]},'
    ' {"tool_calls": [{"name": "read_file", "arguments": {"path": "shared.db"}}]},'
    ' {"text": "ok", "usage": {"input_tokens": 3, "output_tokens": 2}}]'
)


def test_parallel_runs_keep_the_store_whole(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("the store keeps every session and its usage\n")
    script = tmp_path / "grep.json"
    script.write_text(GREP_THEN_ANSWER)
    store = ws / "shared.db"  # inside the workspace: the tools must leave it alone
    procs: list[subprocess.Popen[str]] = []
    try:
        for i in range(RUNS):
            procs.append(
                subprocess.Popen(
                    [*seamline_cmd, "run", "--json", "--store", str(store), "-w", str(ws), f"store usage {i}"]
                    + (["-p", "scripted", "-o", f"script={script}"] if i % 2 else []),
                    env=cli_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                )
            )
        results = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert [p.returncode for p in procs] == [0] * RUNS, [err for _, err in results if err]
    session_ids = [json.loads(out.splitlines()[0])["session_id"] for out, _ in results]
    conn = sqlite3.connect(store)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        stored = dict(conn.execute("SELECT id, status FROM sessions").fetchall())
        assert {sid: stored.get(sid) for sid in session_ids} == dict.fromkeys(session_ids, "completed")
        with_usage = {r[0] for r in conn.execute("SELECT substr(skey, 15) FROM usage_ledger WHERE output_tokens > 0")}
        assert with_usage == set(session_ids)
    finally:
        conn.close()
