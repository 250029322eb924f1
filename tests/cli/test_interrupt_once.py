"""Ctrl-C on `seamline run` in a terminal: the abort is announced once and its end said
once (the summary line), not again by a `turn aborted` line after it."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path


def _read_until(fd: int, proc: subprocess.Popen[bytes], seen: bytearray, marker: bytes | None) -> None:
    """Read the terminal into ``seen`` until ``marker`` shows (or, with None, until it closes)."""
    deadline = time.monotonic() + 60  # a bound on waiting, not a timing under test
    while time.monotonic() < deadline:
        if marker is not None and marker in seen:
            return
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the terminal closed: the program ended
            chunk = b""
        if not chunk:
            if marker is None:
                return
            raise AssertionError(f"the terminal closed before {marker!r}: {bytes(seen)!r}")
        seen.extend(chunk)
    raise AssertionError(f"never saw {marker!r} (exit {proc.poll()}): {bytes(seen)!r}")


def test_ctrl_c_in_a_terminal_reports_the_abort_once(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "slow.json"
    script.write_text(json.dumps([{"text": "never said", "delay": 60}]))
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [*seamline_cmd, "run", "-p", "scripted", "-o", f"script={script}", "hi"],
        stdin=child, stdout=child, stderr=child, env=cli_env, cwd=tmp_path, start_new_session=True,
    )  # fmt: skip
    os.close(child)
    seen = bytearray()
    try:
        _read_until(main, proc, seen, b"waiting on the model")  # the spinner: the turn is under way
        os.kill(proc.pid, signal.SIGINT)  # one Ctrl-C, to the program alone
        _read_until(main, proc, seen, None)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        os.close(main)
    lines = [line.split("\x1b[K")[-1].strip() for line in bytes(seen).decode(errors="replace").splitlines()]
    said = [line for line in lines if "abort" in line]
    assert said[0] == "seamline: aborting (Ctrl-C again to stop at once)", lines
    assert len(said) == 2 and said[1].startswith("[aborted: "), said
    assert "Traceback" not in "\n".join(lines)


def test_ctrl_c_without_a_terminal_still_says_how_the_turn_ended(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    # Without a terminal there is no summary line: the `turn aborted` line is the only word.
    script = tmp_path / "slow.json"
    script.write_text(json.dumps([{"text": "never said", "delay": 60}]))
    proc = subprocess.Popen(
        [*seamline_cmd, "run", "--json", "-p", "scripted", "-o", f"script={script}", "hi"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env, cwd=tmp_path, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())  # the session opened: the turn is under way
        assert first["type"] == "session"
        os.kill(proc.pid, signal.SIGINT)
        out_bytes, err_bytes = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    out, err = out_bytes.decode(), err_bytes.decode()
    assert proc.returncode == 130, err
    assert json.loads(out.splitlines()[-1])["outcome"] == "aborted"
    assert err.splitlines()[-1] == "seamline: turn aborted (aborted)", err
    assert [line for line in err.splitlines() if line].count("seamline: turn aborted (aborted)") == 1
