"""`seamline run` with a real agent CLI in a terminal: a long scan of the workspace by the
edit journal, before the turn (the program not started yet) and after it, is a line on the
terminal, not a silent wait. Claude Code against the fake Anthropic API on 127.0.0.1; the
threshold is set to 0 in the CLI's process so that a small workspace's scan counts as long."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.providers.agent_cli_support import ROOT, AgentAnthropic, cli_path, make_world

pytestmark = pytest.mark.real
MODEL = "claude-sonnet-4-5"

# `seamline` as its console script runs it, with the journal's threshold for a long scan at 0.
SEAMLINE_WITH_NO_THRESHOLD = (
    "import runpy, sys\n"
    "import seamline.providers.programs.journal as journal\n"
    "journal.SCAN_SHOWN_AFTER = 0.0\n"
    "sys.argv[0] = 'seamline'\n"
    "runpy.run_module('seamline', run_name='__main__', alter_sys=True)\n"
)


def _read_to_end(fd: int, proc: subprocess.Popen[bytes]) -> bytes:
    """Everything the program writes to the terminal until it closes."""
    seen = bytearray()
    deadline = time.monotonic() + 120  # a bound on waiting, not a timing under test
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the terminal closed: the program ended
            return bytes(seen)
        if not chunk:
            return bytes(seen)
        seen.extend(chunk)
    raise AssertionError(f"the terminal never closed (exit {proc.poll()}): {bytes(seen)!r}")


def test_a_long_journal_scan_is_a_line_on_the_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = make_world(tmp_path, monkeypatch)
    for k in range(600):  # more than one look at the clock's worth of paths (256)
        (world.workspace / f"f{k}.txt").write_text(f"{k}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "SEAMLINE_STORE": str(tmp_path / "store.db")}
    with AgentAnthropic([{"text": "The word is pelican."}], fallback={"text": "side"}) as fake:
        argv = [
            sys.executable, "-c", SEAMLINE_WITH_NO_THRESHOLD, "run", "--provider", "claude-code", "--model", MODEL,
            "-o", f"executable={cli_path('claude')}", "-o", f"base_url={fake.root_url}", "-o", "max_retries=0",
            "--workspace", str(world.workspace), "What is the secret word?",
        ]  # fmt: skip
        main, child = pty.openpty()
        proc = subprocess.Popen(
            argv, stdin=child, stdout=child, stderr=child, env=env, cwd=tmp_path, start_new_session=True
        )
        os.close(child)
        try:
            seen = _read_to_end(main, proc).decode(errors="replace")
            assert proc.wait(timeout=60) == 0, seen
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            os.close(main)
    assert "The word is pelican." in seen
    drawn = [part for part in seen.split("\r") if "scanning the workspace" in part]
    # The scan before the turn and the one after it, each drawn, then cleared (`\r\x1b[K`).
    assert drawn and all("scanning the workspace for the edit journal… " in part for part in drawn), seen
    assert any(part.rstrip().endswith(" files") for part in drawn), seen
    lines = [line.split("\x1b[K")[-1].strip() for line in seen.split("\n")]
    assert not [line for line in lines if "scanning the workspace" in line], lines  # none left on screen
    assert "Traceback" not in seen
