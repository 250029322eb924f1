"""The shell tool without a sandbox: its output is streamed and capped.

The output is read as it comes; the first and the last bytes up to a cap are kept and
the middle is read and dropped, so a command printing gigabytes costs a few hundred
kilobytes of memory. The answer says how much was left out.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Final

from seamline.errors import TimeoutFailure
from seamline.transport.env import program_env
from seamline.transport.subprocess import group_gone, kill_group, spawn_group

__all__ = ["HeadTail", "run_unsandboxed"]

_CHUNK: Final = 65536


class HeadTail:
    """Keeps the first and the last ``cap // 2`` bytes of a stream, and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            extra = len(self.tail) - self.tail_cap
            if extra > 0:
                del self.tail[:extra]

    @property
    def held(self) -> int:
        return len(self.head) + len(self.tail)

    def text(self) -> str:
        left_out = self.total - self.held
        if left_out <= 0:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", errors="replace")
        return (
            self.head.decode("utf-8", errors="replace")
            + f"\n[output truncated: {left_out} of {self.total} bytes left out; the first and last {self.held} shown]\n"
            + self.tail.decode("utf-8", errors="replace")
        )


async def run_unsandboxed(command: str, *, cwd: Path, timeout: float, cap: int) -> tuple[int, str]:
    """Run ``command`` with ``/bin/sh -c`` in ``cwd``; the exit code and the capped output.

    The command leads its own process group; past ``timeout`` or on cancel the whole
    group is killed and reaped before this returns."""
    proc = await spawn_group(
        "/bin/sh",
        "-c",
        command,
        cwd=cwd,
        env=program_env(),  # the host's git here runs no program the workspace's config names
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    stdout = proc.stdout
    kept = HeadTail(cap)

    async def pump() -> None:
        while chunk := await stdout.read(_CHUNK):
            kept.feed(chunk)
        await proc.wait()

    try:
        await asyncio.wait_for(pump(), timeout=max(timeout, 0.1))
    except (TimeoutError, asyncio.CancelledError) as exc:
        kill_group(proc.pid)
        await proc.wait()
        await group_gone(proc.pid)
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise TimeoutFailure(f"shell command ran past {timeout:g}s and was killed") from None
    return proc.returncode if proc.returncode is not None else -signal.SIGKILL, kept.text()
