"""Subprocess line streams: spawn a program in its own process group, read its stdout
line by line, keep the tail of its stderr, and end the whole group on request.

Ending goes SIGINT, then SIGTERM, then SIGKILL, each to the process group and each after a
grace period, because agent CLIs relaunch themselves as children (signals to the first PID
alone are lost) and some ignore the gentler signals. A signal this process ignores stays
ignored in its children across exec (a program started with ``&`` from a script ignores
SIGINT), so then a child is started behind ``env --default-signal=INT``: it takes SIGINT.

>>> import asyncio
>>> async def demo() -> list[bytes]:
...     proc = await LineProcess.spawn(["printf", "a\\nb\\n"])
...     lines = [line async for line in proc.lines()]
...     await proc.wait()
...     return lines
>>> asyncio.run(demo())
[b'a', b'b']
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from seamline.errors import InvalidRequest, TransportFailure

__all__ = [
    "EndResult",
    "LineProcess",
    "child_argv",
    "group_gone",
    "group_members",
    "kill_group",
    "pids_gone",
    "spawn_group",
]

_CHUNK: Final = 1 << 16
_STDERR_TAIL: Final = 200
_GONE_S: Final = 10.0  # at most, how long ending waits for a killed group's last process to be gone
# (at once in the common case; a process in an uninterruptible disk wait dies only once it returns)
_GONE_POLL_S: Final = 0.01


@dataclass(frozen=True, slots=True)
class EndResult:
    """How a process group was ended: the last signal needed and the leader's exit code."""

    signal: Literal["none", "SIGINT", "SIGTERM", "SIGKILL"]
    returncode: int | None


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``, read from ``/proc``.

    Falls back to ``killpg(pgid, 0)`` where ``/proc`` is not available.
    """
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - not Linux
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    try:
        os.killpg(pgid, 0)  # one system call: a group with no process at all needs no scan of /proc
    except ProcessLookupError:
        return []
    except PermissionError:
        pass  # someone else's group now: the scan says what is there
    members: list[int] = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(entry / "stat")
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def _stat_fields(stat_file: Path) -> list[str]:
    """The fields of a ``/proc/PID/stat`` after the command name (state, ppid, pgrp, …);
    none for a process that is gone."""
    try:
        stat = stat_file.read_text()
    except OSError:
        return []
    # The command name may hold spaces and parentheses; the fields start after the last ')'.
    return stat[stat.rfind(")") + 2 :].split()


def _live(pid: int) -> bool:
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    return bool(fields) and fields[0] != "Z"


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid``; a group already gone is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def group_gone(pgid: int, timeout: float = _GONE_S) -> bool:
    """Wait, up to ``timeout``, until no live process is left in group ``pgid``; whether
    none is. A SIGKILL takes effect only when its process is next scheduled, so a child
    can outlive its reaped leader for a moment on a loaded machine."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while group_members(pgid):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_GONE_POLL_S)
    return True


async def spawn_group(*argv: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """``asyncio.create_subprocess_exec`` as the leader of a new process group, which is
    ended whole if the caller is cancelled while the process starts.

    The process runs from the fork on, but asyncio returns it only once its pipes are
    connected, a few loop turns later. Cancelled in between, asyncio kills the leader's
    pid alone, so a child the leader already started would live on. Here the start runs
    to its end, then the whole group is killed and waited for, then the cancel goes on.
    """
    spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(*argv, start_new_session=True, **kwargs))
    try:
        return await asyncio.shield(spawn)
    except asyncio.CancelledError:
        spawn.add_done_callback(_end_spawned)  # also when this wait is cancelled again
        try:
            proc = await asyncio.shield(spawn)
        except OSError:
            raise asyncio.CancelledError from None  # nothing started
        await proc.wait()
        await group_gone(proc.pid)
        raise


def _end_spawned(spawn: asyncio.Future[asyncio.subprocess.Process]) -> None:
    if not spawn.cancelled() and spawn.exception() is None:
        kill_group(spawn.result().pid)


def pids_gone(pids: Sequence[int], timeout: float = _GONE_S) -> list[int]:
    """Block, up to ``timeout``, until each of ``pids`` has ended (a zombie has); the
    pids still alive then. For processes this one signalled but is not the parent of."""
    deadline = time.monotonic() + timeout
    left = [pid for pid in pids if _live(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(_GONE_POLL_S)
        left = [pid for pid in left if _live(pid)]
    return left


@functools.cache
def _sigint_resetter() -> str | None:
    """An ``env`` that can reset SIGINT to its default (GNU coreutils 8.31+), or None."""
    path = shutil.which("env")
    if path is None:  # pragma: no cover - every POSIX system has one
        return None
    try:
        done = subprocess.run(
            [path, "--default-signal=INT", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):  # pragma: no cover - a broken env
        return None
    return path if done.returncode == 0 else None


def _runnable(program: str, env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None) -> bool:
    if "/" in program:
        where = program if os.path.isabs(program) else os.path.join(os.fspath(cwd or "."), program)
        return os.path.isfile(where) and os.access(where, os.X_OK)
    search = (env if env is not None else os.environ).get("PATH", os.defpath)
    return shutil.which(program, path=search) is not None


def child_argv(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None
) -> list[str]:
    """``argv`` as it is started: unchanged, or behind ``env --default-signal=INT`` when this
    process ignores SIGINT (the child would inherit that and sit out the first signal of
    :meth:`LineProcess.end`). ``env`` execs the program, so the PID stays the program's.

    A program that cannot be found or run, or whose name ``env`` would take for a setting
    or an option, is left as it is so that starting it fails as it always did.
    """
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN or not argv:
        return list(argv)
    if "=" in argv[0] or argv[0].startswith("-"):
        return list(argv)
    resetter = _sigint_resetter()
    if resetter is None or not _runnable(argv[0], env, cwd):
        return list(argv)
    return [resetter, "--default-signal=INT", *argv]


class LineProcess:
    """A spawned program in its own process group, with its stdout as a line stream."""

    def __init__(self, proc: asyncio.subprocess.Process, argv: Sequence[str]) -> None:
        self._proc = proc
        self.argv: tuple[str, ...] = tuple(argv)
        self.pid: int = proc.pid
        # start_new_session makes the child a session and group leader: pgid == pid.
        self.pgid: int = proc.pid
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL)
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        self.ended_by: EndResult | None = None

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stdin: bytes | None = None,
        keep_stdin: bool = False,
    ) -> LineProcess:
        """Start ``argv`` in a new process group; stdin gets ``stdin`` then EOF (or nothing).
        With ``keep_stdin`` it stays open for :meth:`write` until :meth:`close_stdin`."""
        if not argv:
            raise InvalidRequest("empty command line")
        piped = stdin is not None or keep_stdin
        try:
            proc = await spawn_group(
                *child_argv(argv, env=env, cwd=cwd),
                stdin=asyncio.subprocess.PIPE if piped else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
        except FileNotFoundError:
            raise InvalidRequest(f"executable not found: {argv[0]}") from None
        except PermissionError:
            raise InvalidRequest(f"executable is not runnable: {argv[0]}") from None
        except OSError as exc:
            raise TransportFailure(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        line_process = cls(proc, argv)
        if stdin is not None and proc.stdin is not None:
            try:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                pass
            except asyncio.CancelledError:
                # Not handed over yet, so no caller can end it: its group is ended here.
                kill_group(line_process.pgid)
                await line_process.end(grace=0)
                raise
            finally:
                if not keep_stdin:
                    proc.stdin.close()
        return line_process

    async def write(self, data: bytes) -> bool:
        """Write ``data`` to an open stdin; False when the program no longer reads it."""
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing():
            return False
        try:
            stdin.write(data)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def close_stdin(self) -> None:
        """Close stdin: a program that reads it until its end ends now."""
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()

    async def _drain_stderr(self) -> None:
        stream = self._proc.stderr
        if stream is None:
            return
        async for line in _split_lines(stream):
            self._stderr.append(line.decode("utf-8", "replace"))

    async def lines(self) -> AsyncIterator[bytes]:
        """Stdout, one line at a time without its newline; any size of line is fine."""
        stream = self._proc.stdout
        if stream is None:
            return
        async for line in _split_lines(stream):
            yield line

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def stderr_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines the program wrote to stderr."""
        tail = list(self._stderr)[-lines:]
        return "\n".join(tail)

    async def wait(self) -> int:
        """Wait for the leader to exit and stderr to be drained; returns its exit code."""
        code = await self._proc.wait()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), timeout=2.0)
        return code

    def leader_alive(self) -> bool:
        """Whether the program itself still runs (a zombie does not): one ``/proc`` read,
        where :meth:`group_alive` reads every process's."""
        return self._proc.returncode is None and _live(self.pid)

    def group_alive(self) -> bool:
        """Whether any live process of the group is left (the leader or its children)."""
        return bool(group_members(self.pgid))

    def _signal_group(self, sig: signal.Signals) -> bool:
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:  # pragma: no cover - the group's pgid was reused by someone else
            return False
        return True

    async def _gone(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self._proc.returncode is not None and not self.group_alive():
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._proc.wait()), timeout=min(0.05, remaining))

    async def end(self, *, grace: float = 2.0) -> EndResult:
        """End the whole group: SIGINT, then SIGTERM, then SIGKILL, ``grace`` seconds apart.

        Safe to call more than once and after the program exited by itself.
        """
        if self.ended_by is not None and not self.group_alive():
            return self.ended_by
        used: Literal["none", "SIGINT", "SIGTERM", "SIGKILL"] = "none"
        if not await self._gone(0):
            for sig, name in (
                (signal.SIGINT, "SIGINT"),
                (signal.SIGTERM, "SIGTERM"),
                (signal.SIGKILL, "SIGKILL"),
            ):
                if not self._signal_group(sig):
                    break
                used = name  # type: ignore[assignment]
                if await self._gone(grace if sig != signal.SIGKILL else max(grace, _GONE_S)):
                    break
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._proc.wait(), timeout=max(grace, 1.0))
        if self._proc.returncode is not None and not self.group_alive():
            await self._close_pipes()
        self.ended_by = EndResult(signal=used, returncode=self._proc.returncode)
        return self.ended_by

    def kill_now(self) -> None:
        """SIGKILL the whole group and close the pipes, without waiting: for an event loop
        that is shutting down with the program still running (nothing may be left)."""
        kill_group(self.pgid)
        self._stderr_task.cancel()
        transport = getattr(self._proc, "_transport", None)
        if isinstance(transport, asyncio.SubprocessTransport):
            transport.close()

    async def _close_pipes(self) -> None:
        """Close the pipes of a group that is gone, once the tail of stderr is in.

        asyncio closes a pipe only at its end of file, which never comes while a process
        outside the group holds it open or while its reader stopped early (a full buffer
        pauses reading); left open, the transport is found by the garbage collector later,
        which warns "unclosed transport" in whatever runs then.
        """
        with contextlib.suppress(Exception):  # TimeoutError: someone outside the group holds stderr
            await asyncio.wait_for(asyncio.shield(self._stderr_task), timeout=2.0)
        transport = getattr(self._proc, "_transport", None)  # asyncio has no public way to close them
        if isinstance(transport, asyncio.SubprocessTransport):
            transport.close()


async def _split_lines(stream: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """Lines of ``stream`` without their newline, whatever their length (no readline limit)."""
    pending = b""
    while True:
        chunk = await stream.read(_CHUNK)
        if not chunk:
            break
        if b"\n" not in chunk:
            pending += chunk
            continue
        parts = (pending + chunk).split(b"\n")
        pending = parts.pop()
        for line in parts:
            yield line
    if pending:
        yield pending
