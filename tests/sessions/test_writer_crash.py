"""A run killed with SIGKILL keeps every usage figure it reported: the store's writer
thread commits a figure before the run hands it to its caller."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from seamline.sessions.sqlite_store import open_store

STEPS = 400


def _script(path: Path) -> None:
    lines = []
    for i in range(1, STEPS + 1):
        lines.append('- tool_calls: [{name: list_dir, arguments: {path: "."}}]')
        lines.append(f"  usage: {{input_tokens: {i}, output_tokens: 1, cost_usd: {i / 1000}}}")
        lines.append("  delay: 0.002")
    lines.append("- text: never reached")
    path.write_text("\n".join(lines) + "\n")


def test_sigkill_mid_run_keeps_every_reported_usage(
    tmp_path: Path, seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    script = tmp_path / "long.yaml"
    _script(script)
    location = str(tmp_path / "store.db")
    proc = subprocess.Popen(
        [*seamline_cmd, "run", "--json", "--store", location, "-p", "scripted", "-o", f"script={script}", "go"],
        env=cli_env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    reported: list[int] = []
    session_id = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = json.loads(line)
            if event["type"] == "session":
                session_id = event["session_id"]
            elif event["type"] == "usage":
                reported.append(event["input_tokens"])
                if len(reported) == 25:
                    os.killpg(proc.pid, signal.SIGKILL)  # mid-run: hundreds of model calls remain
                    break
        proc.wait(timeout=30)
        assert proc.stdout is not None
        for line in proc.stdout.read().decode().splitlines():  # printed before it died
            event = json.loads(line) if line.startswith("{") and line.endswith("}") else {}
            if event.get("type") == "usage":
                reported.append(event["input_tokens"])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert session_id is not None and len(reported) >= 25
    assert reported == list(range(1, len(reported) + 1))
    store = open_store(location)  # opening it notices the dead owner
    try:
        stored = [u.input_tokens for u in store.usage_rows(session_id)]
        record = store.get(session_id)
    finally:
        store.close()
    assert record is not None and record.status == "interrupted"
    assert stored[: len(reported)] == reported, "a usage figure the run reported is missing from the store"
    assert len(stored) < STEPS
