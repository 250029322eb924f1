"""`seamline run … | head -1`: a reader that goes away ends the run quietly (exit 141,
nothing on stderr), the turn aborted and everything streamed before kept in the store."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

BIG = "y" * 300_000  # more than a pipe holds, so the write blocks until the reader goes


def _script(tmp_path: Path, *, later_delay: float) -> Path:
    script = tmp_path / "script.json"
    steps = [
        {"text": BIG, "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"delay": later_delay, "text": "the late answer"},
    ]
    script.write_text(json.dumps(steps))
    return script


def _run_and_close_after_one_line(cmd: list[str], env: dict[str, str], *args: str) -> tuple[int, str, str]:
    proc = subprocess.Popen([*cmd, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # what `head -1` does after its line
        err = proc.stderr.read()
        return proc.wait(timeout=60), first, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_json_reader_gone_mid_turn_aborts_quietly_and_keeps_the_session(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    script = _script(tmp_path, later_delay=1.0)
    code, first, err = _run_and_close_after_one_line(
        seamline_cmd, cli_env, "run", "--json", "--store", str(store), "-p", "scripted",
        "-o", f"script={script}", "-w", str(tmp_path), "--yes", "go",
    )  # fmt: skip
    assert json.loads(first)["type"] == "session"
    assert err == ""  # no traceback, no "internal error"
    assert code == 141
    sid = json.loads(first)["session_id"]
    with sqlite3.connect(store) as conn:
        (status,) = conn.execute("SELECT status FROM sessions WHERE id = ?", (sid,)).fetchone()
        kinds = [
            r[0] for r in conn.execute("SELECT source FROM raw_log WHERE substr(skey, 15) = ? ORDER BY seq", (sid,))
        ]
    assert status == "aborted"  # the reader left during the turn: the turn is aborted, not run on
    assert kinds[0] == "prompt" and "event" in kinds  # what streamed before is kept


def test_text_reader_gone_ends_quietly(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    script = _script(tmp_path, later_delay=0)
    code, _, err = _run_and_close_after_one_line(
        seamline_cmd, cli_env, "run", "--store", str(tmp_path / "s.db"), "-p", "scripted",
        "-o", f"script={script}", "-w", str(tmp_path), "--yes", "go",
    )  # fmt: skip
    assert err == "" and code in (0, 141)
