"""Run one process with a wall-clock limit and a cap on captured output.

The process leads its own process group; when it runs past the wall limit, prints past
the cap, or the caller is cancelled, the whole group is killed and reaped before this
returns, so nothing it started outlives the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from seamline.transport.subprocess import group_gone, kill_group, spawn_group

__all__ = ["CommandOutcome", "run_bounded"]

_CHUNK: Final = 65536
# How long output may keep flowing after the main process ended (a child holding the pipe).
_DRAIN_GRACE_S: Final = 0.5


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    """What a bounded run gave: exit status (negative: killed by that signal), output, and
    whether it was stopped for time or for output."""

    returncode: int
    output: bytes
    timed_out: bool
    flooded: bool
    wall_s: float


async def run_bounded(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    wall_s: float,
    output_bytes: int,
    pass_fds: Sequence[int] = (),
) -> CommandOutcome:
    """Run ``argv`` (stdin closed, stderr merged into stdout) within the limits."""
    started = time.perf_counter()
    proc = await spawn_group(
        *argv,
        env=dict(env),
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        pass_fds=tuple(pass_fds),
    )
    assert proc.stdout is not None
    stdout = proc.stdout
    buf = bytearray()
    flooded = killed = False

    def kill() -> None:
        nonlocal killed
        killed = True
        kill_group(proc.pid)

    async def pump() -> None:
        nonlocal flooded
        while True:
            chunk = await stdout.read(_CHUNK)
            if not chunk:
                return
            if flooded:
                continue  # drain to EOF: asyncio reports the exit only once the pipe closes
            room = output_bytes - len(buf)
            if len(chunk) > room:
                buf.extend(chunk[: max(room, 0)])
                flooded = True
                kill()
                continue
            buf.extend(chunk)

    reader = asyncio.ensure_future(pump())
    timed_out = False
    try:
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=max(wall_s, 0.01))
        except TimeoutError:
            timed_out = not flooded
            kill()
        try:
            await asyncio.wait_for(asyncio.shield(reader), timeout=_DRAIN_GRACE_S)
        except TimeoutError:
            # A child still holds the pipe open after the main process ended.
            kill()
            reader.cancel()
    except asyncio.CancelledError:
        kill_group(proc.pid)
        reader.cancel()
        await proc.wait()
        await group_gone(proc.pid)
        raise
    finally:
        if proc.returncode is None:
            kill()
            await proc.wait()
    if not reader.done():
        reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader
    if killed:
        await group_gone(proc.pid)
    returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    return CommandOutcome(
        returncode=returncode,
        output=bytes(buf),
        timed_out=timed_out,
        flooded=flooded,
        wall_s=time.perf_counter() - started,
    )
