"""What ends a process group returns only once every process of it is gone.

A SIGKILL takes effect when its process is next scheduled, so on a loaded machine a
killed child can still be alive a moment after its group's leader was reaped; a CLI that
exits then leaves it behind for a moment (seen as a random failure of
``tests/sandbox/test_cli_signals.py``). Here the moment is made long and certain: the
leader dies at once, the rest of the group only ``_LATE_S`` later.

A process also runs from its fork on, before asyncio hands it over: a cancel that lands
while its pipes are being connected must still end its whole group.
"""

from __future__ import annotations

import asyncio
import asyncio.base_subprocess
import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from seamline.sandbox.process import run_bounded
from seamline.tools.mcp import end_marked_processes
from seamline.tools.shell_output import run_unsandboxed
from seamline.transport.subprocess import LineProcess
from tests.fixtures.processes import alive

_LATE_S = 0.5


class _LateSignals:
    """``os.kill``/``os.killpg`` whose signal reaches the named process at once and the
    rest of its group (or, for ``os.kill``, the process itself) ``_LATE_S`` later."""

    def __init__(self) -> None:
        self.real_kill, self.real_killpg = os.kill, os.killpg
        self.timers: list[threading.Timer] = []

    def _later(self, send: Callable[[int, int], None], target: int, sig: int) -> None:
        def late() -> None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                send(target, sig)

        timer = threading.Timer(_LATE_S, late)
        timer.start()
        self.timers.append(timer)

    def killpg(self, pgid: int, sig: int) -> None:
        if sig == 0:  # a probe (is any process of the group left?) delivers nothing: answered now
            self.real_killpg(pgid, 0)
            return
        self._later(self.real_killpg, pgid, sig)
        self.real_kill(pgid, sig)  # the leader at once

    def kill(self, pid: int, sig: int) -> None:
        if sig == signal.SIGKILL:
            os.stat(f"/proc/{pid}")  # a gone process is still ProcessLookupError at once
            self._later(self.real_kill, pid, sig)
        else:
            self.real_kill(pid, sig)


@pytest.fixture
def late(monkeypatch: pytest.MonkeyPatch) -> Iterator[_LateSignals]:
    signals = _LateSignals()
    monkeypatch.setattr(os, "killpg", signals.killpg)
    monkeypatch.setattr(os, "kill", signals.kill)
    yield signals
    monkeypatch.undo()
    for timer in signals.timers:
        timer.join()


def _end(pid_file: Path) -> None:
    if pid_file.exists() and (text := pid_file.read_text().strip()).isdigit() and alive(int(text)):
        os.kill(int(text), signal.SIGKILL)


async def _pid_in(path: Path) -> int:
    for _ in range(2000):
        if path.exists() and (text := path.read_text().strip()).isdigit():
            return int(text)
        await asyncio.sleep(0.005)
    raise AssertionError(f"no pid in {path}")


def test_a_cancelled_shell_command_returns_once_its_children_are_gone(tmp_path: Path, late: _LateSignals) -> None:
    bg = tmp_path / "bg.pid"

    async def scenario() -> int:
        task = asyncio.ensure_future(
            run_unsandboxed("sleep 1000 >/dev/null 2>&1 & echo $! > bg.pid; wait", cwd=tmp_path, timeout=600, cap=1000)
        )
        pid = await _pid_in(bg)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pid

    try:
        pid = asyncio.run(scenario())
        assert not alive(pid)
        assert late.timers  # the group was signalled, late
    finally:
        _end(bg)


def test_a_bounded_command_past_its_time_returns_once_its_children_are_gone(tmp_path: Path, late: _LateSignals) -> None:
    bg = tmp_path / "bg.pid"
    try:
        outcome = asyncio.run(
            run_bounded(
                ["/bin/sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $! > bg.pid; wait"],
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                cwd=tmp_path,
                wall_s=0.5,
                output_bytes=1000,
            )
        )
        assert outcome.timed_out
        assert not alive(int(bg.read_text()))
    finally:
        _end(bg)


def test_ending_marked_processes_returns_once_they_are_gone(late: _LateSignals) -> None:
    marker = uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(1000)"],
        env=dict(os.environ, SEAMLINE_TEST_MARK=marker),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        # Popen returns once the exec began; the new environment is readable in /proc only
        # once the program runs (a loaded machine showed the gap): wait for it to say so.
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        assert end_marked_processes("SEAMLINE_TEST_MARK", marker) == [proc.pid]
        assert not alive(proc.pid)  # dead: a zombie until this test reaps it
    finally:
        if proc.poll() is None:
            late.real_killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


_STARTS: dict[str, Callable[[Path], Awaitable[Any]]] = {
    "shell": lambda ws: run_unsandboxed(
        "sleep 1000 >/dev/null 2>&1 & echo $! > bg.pid; wait", cwd=ws, timeout=600, cap=1000
    ),
    "bounded": lambda ws: run_bounded(
        ["/bin/sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $! > bg.pid; wait"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd=ws,
        wall_s=600,
        output_bytes=1000,
    ),
    "line process": lambda ws: LineProcess.spawn(
        ["/bin/sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $! > bg.pid; wait"], cwd=ws
    ),
}


@pytest.mark.parametrize("start", sorted(_STARTS))
def test_a_command_cancelled_while_it_starts_leaves_no_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    """Held between the fork and the pipes' connection (a loaded machine's moment, made
    certain): the command has started a child when the cancel lands."""
    bg = tmp_path / "bg.pid"
    release = asyncio.Event()
    connect = asyncio.base_subprocess.BaseSubprocessTransport._connect_pipes

    async def held(transport: asyncio.base_subprocess.BaseSubprocessTransport, waiter: Any) -> None:
        await release.wait()
        await connect(transport, waiter)

    monkeypatch.setattr(asyncio.base_subprocess.BaseSubprocessTransport, "_connect_pipes", held)

    async def scenario() -> int:
        task = asyncio.ensure_future(_STARTS[start](tmp_path))
        pid = await _pid_in(bg)
        task.cancel()
        await asyncio.sleep(0.05)  # the cancel lands while the pipes are still held
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pid

    try:
        pid = asyncio.run(scenario())
        assert not alive(pid)
    finally:
        _end(bg)


def test_a_line_process_cancelled_while_its_input_is_written_is_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command never reads its input, so writing more than a pipe holds waits; a
    cancel then must not leave a group that nobody was handed."""
    bg = tmp_path / "bg.pid"
    writing = asyncio.Event()
    drain = asyncio.StreamWriter.drain

    async def watched(writer: asyncio.StreamWriter) -> None:
        writing.set()
        await drain(writer)

    monkeypatch.setattr(asyncio.StreamWriter, "drain", watched)

    async def scenario() -> int:
        task = asyncio.ensure_future(
            LineProcess.spawn(
                ["/bin/sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $! > bg.pid; wait"],
                cwd=tmp_path,
                stdin=b"x" * (4 << 20),
            )
        )
        pid = await _pid_in(bg)
        await writing.wait()  # started and handed over: the cancel lands in the write
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pid

    try:
        pid = asyncio.run(scenario())
        assert not alive(pid)
    finally:
        _end(bg)
