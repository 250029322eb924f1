"""Reading one turn of an agent CLI's output, whether the process was started for the turn
or is kept warm between turns (:mod:`seamline.providers.programs.warm_process`).

Each line goes to the raw log and to the turn's stream parser. The turn is bounded here:
its timeout, and the retries the CLI reports (on stdout, or on stderr read once a tick)
against our own bound. Egress refusals of the envelope are reported as they happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from seamline.events import Event, Raw
from seamline.providers.agent_clis.parsers.base import StreamParser
from seamline.providers.base import ProviderSession
from seamline.providers.programs.envelope_launch import Enveloped
from seamline.transport.subprocess import LineProcess

__all__ = ["TurnBounds", "TurnReading", "ending_diagnostic", "read_turn_output"]

_STDERR_TICK: Final = 1.0
STDERR_LINES: Final = 200


@dataclass(frozen=True, slots=True)
class TurnBounds:
    """What bounds a turn: its timeout, the API retries allowed, the grace between signals."""

    timeout: float
    max_retries: int
    grace: float


@dataclass(slots=True)
class TurnReading:
    """How the reading of a turn ended, when not by the end of its output."""

    timed_out: str | None = None
    gave_up: str | None = None

    @property
    def cut_short(self) -> bool:
        return self.timed_out is not None or self.gave_up is not None


async def read_turn_output(
    *,
    who: str,
    session: ProviderSession,
    parser: StreamParser,
    proc: LineProcess,
    envelope: Enveloped | None,
    bounds: TurnBounds,
    fetch: Callable[[], Awaitable[bytes | None]],
    gave_up: Callable[[int, int], str],
    until_terminal: bool,
    reading: TurnReading,
) -> AsyncGenerator[Event, None]:
    """The events of one turn's output lines, read with ``fetch`` (None: the output ended)
    until it ends, or, with ``until_terminal``, until the parser has seen the turn's
    terminal line. A timeout or a give-up is left in ``reading``."""
    store = session.store
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bounds.timeout
    next_line: asyncio.Future[bytes | None] | None = None
    next_check = loop.time() + _STDERR_TICK
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                reading.timed_out = f"{who}: the turn passed its timeout of {bounds.timeout:g} s"
                break
            if next_line is None:
                next_line = asyncio.ensure_future(fetch())
            # Wake at least every second: some CLIs report their retries on stderr only.
            await asyncio.wait({next_line}, timeout=min(remaining, _STDERR_TICK))
            if loop.time() >= next_check:
                # At most once a tick, so a fast stream of deltas pays nothing for it.
                next_check = loop.time() + _STDERR_TICK
                for event in parser.watch_stderr(proc.stderr_tail(STDERR_LINES)):
                    yield event
                if parser.retries > bounds.max_retries:
                    reading.gave_up = gave_up(parser.retries, bounds.max_retries)
                    break
            if envelope is not None:
                for event in envelope.refusals():
                    yield event
            if not next_line.done():
                continue
            line = next_line.result()
            next_line = None
            if line is None:
                break
            if store is not None and line.strip():
                store.append_raw(
                    session.session_id, session.turn, "out", parser.source, line.decode("utf-8", "replace")
                )
            parser.aborting = session.aborted
            for event in parser.feed(line):
                yield event
            if parser.retries > bounds.max_retries:
                reading.gave_up = gave_up(parser.retries, bounds.max_retries)
                break
            if until_terminal and parser.terminal_seen:
                break
    finally:
        if next_line is not None and not next_line.done():
            next_line.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await next_line


def ending_diagnostic(proc: LineProcess, returncode: int | None) -> Raw | None:
    """Which signal ended the program, when one did: the one that killed the leader (its
    negative exit code says which), else the last one seamline had to send the group."""
    ended = proc.ended_by
    sent = ended.signal if ended is not None else "none"
    killed_by = _signal_name(-returncode) if returncode is not None and returncode < 0 else None
    if killed_by is None and sent == "none":
        return None
    payload: dict[str, Any] = {"ended_process_group": proc.pgid, "signal": killed_by or sent, "signals_sent": sent}
    if killed_by is not None and sent == "none":
        payload["by"] = "outside"  # nobody here signalled it
    return Raw(source="seamline", payload=payload)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
