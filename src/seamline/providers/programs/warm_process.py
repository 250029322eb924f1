"""Agent CLIs kept warm: one live process per session, fed one user turn at a time.

A CLI started per turn pays its start-up on every turn (Node, its configuration, the
session read back from disk). A CLI that takes its turns on stdin (Claude Code's
``--input-format stream-json``) is started once, on a session's first turn, and kept:
each later turn writes one message and reads the output up to that turn's terminal line.

:class:`WarmProcess` owns the process and what lives as long as it does (the envelope,
the approval socket): a reader task moves stdout into a queue, so a turn reads it at its
own pace and the end of a turn is seen even while nobody reads (an abort waits on it). The
process is ended by :meth:`WarmProcess.close` (the session closes, a turn failed in a way
that leaves it unusable), by its idle timer, and, for whatever is left, when the event
loop shuts down (its reader task is cancelled) or this Python process exits (``atexit``).
Nothing here knows a CLI's dialect: the provider says what a terminal line looks like.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import Any, Final

from seamline.providers.base import OptionSpec
from seamline.providers.programs.envelope_launch import Enveloped
from seamline.transport.subprocess import LineProcess, kill_group

__all__ = ["WARM_OPTIONS", "WarmProcess"]

WARM_OPTIONS: Final[dict[str, OptionSpec]] = {
    "warm": OptionSpec(
        "keep one live CLI process per session and send it each turn (true), or start one per turn (false)",
        default="true",
        choices=("true", "false"),
    ),
    "warm_idle": OptionSpec(
        "seconds a warm CLI process may sit idle between turns before it is ended",
        default="300",
        kind="positive_number",
        operator_only=True,  # a server's clients do not decide how long its processes live
    ),
}

# Every warm process group still running, ended at interpreter exit if nobody closed it.
_LIVE: Final[set[int]] = set()


@atexit.register
def _end_leftovers() -> None:  # pragma: no cover - runs at interpreter exit
    for pgid in list(_LIVE):
        kill_group(pgid)
    _LIVE.clear()


class WarmProcess:
    """A CLI process kept between turns: its stdin open, its stdout read into a queue."""

    def __init__(self, proc: LineProcess, *, is_terminal: Callable[[bytes], bool]) -> None:
        self.proc = proc
        self.is_terminal = is_terminal
        #: whatever the provider carries from one turn of this process to the next
        self.carry: dict[str, Any] = {}
        #: how many turns were sent to this process
        self.turns = 0
        #: the envelope it runs in (``sandbox=bwrap``), if any
        self.envelope: Enveloped | None = None
        #: why seamline ended it (None: still running, or it ended by itself)
        self.ended_because: str | None = None
        self.in_turn = False
        self._lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._backlog: collections.deque[bytes] = collections.deque()
        self._turn_over = asyncio.Event()
        self._eof = False
        self._closing = False
        self._attached: list[tuple[object, Callable[[], Awaitable[None]]]] = []
        self._idle: asyncio.TimerHandle | None = None
        self._ending: asyncio.Future[None] | None = None
        self._ended = False
        _LIVE.add(proc.pgid)
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(
        cls,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str | os.PathLike[str],
        is_terminal: Callable[[bytes], bool],
    ) -> WarmProcess:
        """Start ``argv`` in its own process group, its stdin kept open for the turns."""
        proc = await LineProcess.spawn(argv, env=env, cwd=cwd, keep_stdin=True)
        return cls(proc, is_terminal=is_terminal)

    # -- state -------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        """Whether it can take a turn: running, its output not ended, not being ended."""
        # The leader only: reading every process's /proc entry would cost a turn milliseconds.
        return not (self._closing or self._eof) and self.proc.leader_alive()

    def attach(self, thing: object, closer: Callable[[], Awaitable[None]]) -> None:
        """Keep ``thing`` (an envelope, an approval socket) until the process ends."""
        self._attached.append((thing, closer))

    def holds(self, thing: object) -> bool:
        return any(kept is thing for kept, _ in self._attached)

    # -- turns -------------------------------------------------------------------------
    async def begin_turn(self, message: bytes) -> bool:
        """Send one turn's input; False when the process no longer takes it."""
        self._cancel_idle()
        if not self.alive:
            return False
        self._turn_over.clear()
        self.in_turn = True
        self.turns += 1
        if await self.proc.write(message):
            return True
        self.in_turn = False
        return False

    def put_back(self, lines: list[bytes]) -> None:
        """Lines already read (a handshake's), read again first by the next turn."""
        self._backlog.extend(lines)

    async def next_line(self) -> bytes | None:
        """The next line of output; None once the output has ended."""
        if self._backlog:
            return self._backlog.popleft()
        line = await self._lines.get()
        if line is None:
            self._lines.put_nowait(None)  # every later read sees the end too
        return line

    async def turn_over(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the current turn's terminal line (or the output's end)."""
        if not self.in_turn:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._turn_over.wait(), timeout=timeout)
        return self._turn_over.is_set()

    async def interrupt(self, message: bytes) -> bool:
        """Send a control message while a turn runs; False when it could not be sent."""
        return self.in_turn and self.alive and await self.proc.write(message)

    def end_turn(self, *, idle: float, grace: float) -> None:
        """The turn is over and the process stays: it is ended after ``idle`` seconds unused."""
        self.in_turn = False
        self._cancel_idle()
        loop = asyncio.get_running_loop()
        self._idle = loop.call_later(idle, self._reap_idle, grace)

    # -- ending ------------------------------------------------------------------------
    async def close(self, *, grace: float, because: str) -> None:
        """End the process (stdin closed first: a CLI that reads it to its end exits by
        itself), then its whole group if need be, and what was attached to it. Safe to
        call again, and while an idle ending runs (it waits for that one)."""
        if self._ending is None:
            if self.ended_because is None:
                self.ended_because = because
            self._closing = True
            self._cancel_idle()
            self._ending = asyncio.ensure_future(self._end(grace))
        await asyncio.shield(self._ending)

    async def _end(self, grace: float) -> None:
        try:
            self.proc.close_stdin()
            if self.proc.returncode is None or self.proc.group_alive():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self.proc.wait()), timeout=grace)
            if self.proc.returncode is None or self.proc.group_alive():
                await self.proc.end(grace=grace)
        finally:
            self._ended = True
            _LIVE.discard(self.proc.pgid)
            await self._stop_reader()
            attached, self._attached = self._attached, []
            for _, closer in reversed(attached):
                with contextlib.suppress(Exception):
                    await closer()

    async def _stop_reader(self) -> None:
        if not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    def _cancel_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _reap_idle(self, grace: float) -> None:
        self._idle = None
        if not self.in_turn and self._ending is None:
            self.ended_because = "idle"
            self._closing = True
            self._ending = asyncio.ensure_future(self._end(grace))

    async def _read(self) -> None:
        try:
            async for line in self.proc.lines():
                self._lines.put_nowait(line)
                if self.in_turn and self.is_terminal(line):
                    self._turn_over.set()
        except asyncio.CancelledError:
            if not self._ended:
                # The event loop is shutting down with this process unclosed: leave nothing,
                # and reap it while the loop still runs (asyncio warns about a late exit).
                kill_group(self.proc.pgid)
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(self.proc.wait()), timeout=2.0)
                self.proc.kill_now()
                _LIVE.discard(self.proc.pgid)
            raise
        finally:
            self._eof = True
            self._turn_over.set()
            self._lines.put_nowait(None)
