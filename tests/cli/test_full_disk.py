"""Output to a full disk (`> /dev/full`, ENOSPC on every write): one clear line on stderr
and a non-zero exit, never a traceback, and what the run recorded is kept. It printed
"internal error" and two asyncio tracebacks ("generator didn't stop after athrow()") from
the event stream's generators, left unclosed; `sessions list` exited 0 having written
nothing."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

DEV_FULL = Path("/dev/full")
pytestmark = pytest.mark.skipif(not DEV_FULL.exists(), reason="not on this machine: no /dev/full")


def _to_full_disk(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    with DEV_FULL.open("w") as full:
        return subprocess.run(cmd, env=env, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, check=False)


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_run_writing_to_a_full_disk_says_so_in_one_line_and_keeps_the_session(
    seamline_cmd: list[str], cli_env: dict[str, str], json_flag: list[str]
) -> None:
    done = _to_full_disk(
        [*seamline_cmd, "run", *json_flag, "--workspace", "docs", "What does the store keep?"], cli_env
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], done.stderr
    with sqlite3.connect(cli_env["SEAMLINE_STORE"]) as db:
        (count,) = db.execute("SELECT count(*) FROM sessions").fetchone()
    assert count == 1


def test_a_listing_to_a_full_disk_says_so_in_one_line(seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    made = subprocess.run(
        [*seamline_cmd, "run", "--json", "--workspace", "docs", "What does the store keep?"],
        env=cli_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout.splitlines()[0])["type"] == "session"
    for command in (["sessions", "list"], ["providers", "list"]):
        done = _to_full_disk([*seamline_cmd, *command], cli_env)
        assert done.returncode == 1, (command, done.stderr)
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "No space left on device" in lines[0], done.stderr
