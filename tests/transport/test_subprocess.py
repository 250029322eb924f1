"""Subprocess line streams: own process group, any line size, ending the whole group."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import warnings
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest
from seamline.transport.subprocess import LineProcess, group_members

PY = sys.executable


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_lines_in_order_with_a_long_line_and_no_final_newline() -> None:
    async def go() -> tuple[list[bytes], int]:
        code = "import sys; sys.stdout.write('a\\n' + 'x' * 300000 + '\\nlast')"
        proc = await LineProcess.spawn([PY, "-c", code])
        lines = [line async for line in proc.lines()]
        return lines, await proc.wait()

    lines, code = run(go())  # type: ignore[misc]
    assert lines == [b"a", b"x" * 300000, b"last"] and code == 0


def test_stdin_env_cwd_and_stderr_tail(tmp_path: Path) -> None:
    async def go() -> tuple[list[bytes], str]:
        code = (
            "import os, sys; print(sys.stdin.read(), os.environ['PROBE'], os.getcwd()); print('oops', file=sys.stderr)"
        )
        proc = await LineProcess.spawn(
            [PY, "-c", code], env={"PROBE": "p1", "PATH": "/usr/bin:/bin"}, cwd=tmp_path, stdin=b"in"
        )
        lines = [line async for line in proc.lines()]
        await proc.wait()
        return lines, proc.stderr_tail()

    lines, err = run(go())  # type: ignore[misc]
    assert lines == [f"in p1 {tmp_path}".encode()] and err == "oops"


def test_the_child_leads_its_own_group() -> None:
    async def go() -> tuple[int, int]:
        proc = await LineProcess.spawn([PY, "-c", "import os; print(os.getpgid(0))"])
        lines = [line async for line in proc.lines()]
        await proc.wait()
        return proc.pid, int(lines[0])

    pid, pgid = run(go())  # type: ignore[misc]
    assert pid == pgid


def test_end_escalates_past_ignored_signals_and_reaches_grandchildren() -> None:
    # A program that ignores SIGINT and SIGTERM and has a grandchild that does too: only
    # SIGKILL to the whole group ends them all.
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "inner = 'import signal,time; signal.signal(2, signal.SIG_IGN); signal.signal(15, signal.SIG_IGN); time.sleep(60)'\n"
        "subprocess.Popen([sys.executable, '-c', inner])\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )

    async def go() -> tuple[str, list[int], list[int]]:
        proc = await LineProcess.spawn([PY, "-c", code])
        async for _line in proc.lines():
            break
        await asyncio.sleep(0.3)
        before = group_members(proc.pgid)
        ended = await proc.end(grace=0.3)
        return ended.signal, before, group_members(proc.pgid)

    signal_used, before, after = run(go())  # type: ignore[misc]
    assert len(before) == 2 and after == [] and signal_used == "SIGKILL"


def test_end_stops_at_sigint_when_that_suffices() -> None:
    async def go() -> tuple[str, int | None]:
        proc = await LineProcess.spawn([PY, "-c", "import time; print('up', flush=True); time.sleep(60)"])
        async for _line in proc.lines():
            break
        ended = await proc.end(grace=2)
        again = await proc.end(grace=2)  # idempotent
        assert again == ended
        return ended.signal, ended.returncode

    signal_used, code = run(go())  # type: ignore[misc]
    assert signal_used == "SIGINT" and code is not None and code != 0


def test_end_closes_the_pipes_a_process_outside_the_group_still_holds() -> None:
    # The pipe never reaches its end, so asyncio never closes it: left open, it is found by
    # a later gc.collect(), whose "unclosed transport" ResourceWarning fails whatever test runs then.
    outsider: list[int] = []

    async def go() -> None:
        # Popen returns once the child runs `sleep` in a session of its own, holding stdout.
        code = (
            "import subprocess as sp; print(sp.Popen(['sleep', '60'], start_new_session=True, stderr=sp.DEVNULL).pid)"
        )
        proc = await LineProcess.spawn([PY, "-c", code])
        async for line in proc.lines():
            outsider.append(int(line))
            break
        await proc.end(grace=0.3)
        await proc.wait()

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            run(go())
            gc.collect()
    finally:
        for pid in outsider:
            os.kill(pid, signal.SIGKILL)
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


@pytest.mark.parametrize("program", ["python", "path"])
def test_a_child_takes_sigint_even_when_this_process_ignores_it(program: str, sigint_ignored: None) -> None:
    # A process started in the background by a non-interactive shell (`cmd &`, nohup) has
    # SIGINT ignored, and an ignored signal stays ignored across exec: the child would sit
    # out SIGINT and cost a whole grace period before SIGTERM.
    script = "import time; print('up', flush=True); time.sleep(60)"
    argv = [PY, "-c", script] if program == "python" else ["python3", "-c", script]

    async def go() -> str:
        proc = await LineProcess.spawn(argv)
        assert proc.argv == tuple(argv)  # what errors and `providers check` name
        async for _line in proc.lines():
            break
        return (await proc.end(grace=5)).signal

    assert run(go()) == "SIGINT"


def test_a_missing_executable_is_still_not_found_when_sigint_is_ignored(tmp_path: Path, sigint_ignored: None) -> None:
    with pytest.raises(InvalidRequest, match="not found"):
        run(LineProcess.spawn([str(tmp_path / "no-such-program")]))
    with pytest.raises(InvalidRequest, match="not found"):
        run(LineProcess.spawn(["no-such-program-anywhere"], env={"PATH": str(tmp_path)}))


def test_missing_executable_is_a_classified_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="not found"):
        run(LineProcess.spawn([str(tmp_path / "no-such-program")]))
    with pytest.raises(InvalidRequest, match="empty"):
        run(LineProcess.spawn([]))
