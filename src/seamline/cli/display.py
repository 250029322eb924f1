"""How a run looks: one JSON event per line, or text with live progress on a terminal."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any, Final, TextIO

import msgspec

from seamline.events import (
    Complete,
    Error,
    Event,
    FileChange,
    PermissionDecision,
    Raw,
    Session,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
    encode_event,
)
from seamline.providers.base import ProviderSession
from seamline.providers.programs.journal import show_scans
from seamline.tools.terminal_line import TERMINAL_LINE

__all__ = ["JsonDisplay", "TextDisplay", "one_line", "show_journal_scans", "spin_while", "turn_ended"]

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_QUIET_BEFORE_SPIN = 0.5  # seconds without output before the spinner shows

_LINE_LIMIT = 300


def one_line(text: str, *, limit: int = _LINE_LIMIT) -> str:
    """``text`` as one line for stderr: its first non-blank line, cut at ``limit``, with a
    mark when something was left out (a tool's output or a stack can run to thousands)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    cut = len(first) > limit or len(lines) > 1
    first = first[:limit]
    return first + " […]" if cut else first


def stdout_gone() -> None:
    """Point stdout at /dev/null once its reader has gone (``| head``), so what is still
    buffered, and every later write, goes nowhere instead of failing again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no stdout file at all: nothing will write to it
        pass


async def aclose_events(events: AsyncIterator[Event]) -> None:
    """Close an event stream that was left before its end, here and now: left to the
    garbage collector, nested generators are closed in any order at loop shutdown."""
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


_TOKEN_KEYS: Final = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


class JsonDisplay:
    """Every event as one compact JSON line on stdout, nothing else."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self._out = out.buffer if hasattr(out, "buffer") else None
        self._text_out = out
        self._totals: dict[str, Any] = dict.fromkeys(_TOKEN_KEYS, 0) | {"cost_usd": 0.0, "priced": True}

    def show(self, event: Event) -> None:
        if type(event) is Usage:
            for key in _TOKEN_KEYS:
                self._totals[key] += getattr(event, key)
            cost = self._totals["cost_usd"]
            self._totals["cost_usd"] = None if cost is None or event.cost_usd is None else cost + event.cost_usd
            self._totals["priced"] = self._totals["priced"] and event.priced
        data = encode_event(event) + b"\n"
        if type(event) is Complete:  # the line ends with the run's totals, summed from its usage
            data = data[:-2] + b',"totals":' + msgspec.json.encode(self._totals) + b"}\n"
        if self._out is not None:
            self._out.write(data)
            if type(event) is Complete:
                self._out.flush()
        else:
            self._text_out.write(data.decode())

    def close(self) -> None:
        if self._out is not None:
            self._out.flush()


class TextDisplay:
    """The answer on stdout; tools, tokens and cost on stderr when it is a terminal."""

    def __init__(self, out: TextIO = sys.stdout, err: TextIO = sys.stderr, *, progress: bool | None = None) -> None:
        self.out = out
        self.err = err
        self.progress = err.isatty() if progress is None else progress
        self._streamed = False
        self._calls: dict[str, ToolCall] = {}  # tool calls whose result has not come yet
        self.input_tokens = 0
        self.output_tokens = 0
        self.cost: float | None = 0.0
        self.session_id: str | None = None
        self.started = time.monotonic()
        self._last_output = self.started
        self._spinning = False
        self._frame = 0

    def spin(self) -> None:
        """One spinner frame on stderr (a terminal only) when nothing was shown for a while:
        the elapsed time, so a model that thinks long is not taken for a hang."""
        if not self.progress or self._streamed:
            return
        now = time.monotonic()
        if now - self._last_output < _QUIET_BEFORE_SPIN:
            return
        # A permission question owns the line while it waits (it is asked on another thread).
        if not TERMINAL_LINE.lock.acquire(blocking=False):
            return
        try:
            if not TERMINAL_LINE.free():
                self._spinning = False  # the question cleared the frame
                return
            self._frame = (self._frame + 1) % len(_SPINNER)
            doing = f"running {next(iter(self._calls.values())).name}" if self._calls else "waiting on the model"
            self.err.write(f"\r\033[K{_SPINNER[self._frame]} {doing} · {now - self.started:.1f}s")
            self.err.flush()
            self._spinning = True
        finally:
            TERMINAL_LINE.lock.release()

    def scanning(self, count: int | None) -> None:
        """The edit journal's long scan of the workspace on the last line (a terminal only):
        the count of files so far, redrawn as it grows; ``None`` clears it. Called from the
        scan itself, which holds the event loop: the spinner cannot turn meanwhile."""
        if not self.progress or self._streamed:
            return
        if not TERMINAL_LINE.lock.acquire(blocking=False):
            return
        try:
            if not TERMINAL_LINE.free():
                return
            if count is None:
                if self._spinning:
                    self.err.write("\r\033[K")
                    self._spinning = False
            else:
                self._frame = (self._frame + 1) % len(_SPINNER)
                self.err.write(
                    f"\r\033[K{_SPINNER[self._frame]} scanning the workspace for the edit journal… {count:,} files"
                )
                self._spinning = True  # the next event or spinner frame clears it
            self.err.flush()
        finally:
            TERMINAL_LINE.lock.release()

    def _unspin(self) -> None:
        if self._spinning:
            self.err.write("\r\033[K")
            self.err.flush()
            self._spinning = False

    def show(self, event: Event) -> None:
        kind = type(event)
        self._last_output = time.monotonic()
        if self._spinning:
            self._unspin()
        if kind is TextDelta:
            self.out.write(event.text)  # type: ignore[union-attr]
            self.out.flush()
            self._streamed = True
        elif kind is Text:
            if not self._streamed:
                self.out.write(event.text)  # type: ignore[union-attr]
                if not event.text.endswith("\n"):  # type: ignore[union-attr]
                    self.out.write("\n")
            elif not event.text.endswith("\n"):  # type: ignore[union-attr]
                self.out.write("\n")
            self._streamed = False
        elif isinstance(event, Session):
            self.session_id = event.session_id
        elif isinstance(event, ToolCall):
            self._calls[event.call_id] = event
            self._note(f"→ {event.name} {_brief(event.arguments)}")
        elif isinstance(event, ToolResult):
            self._calls.pop(event.call_id, None)
            mark = "✗" if event.is_error else "✓"
            self._note(f"  {mark} {event.name or ''} {one_line(event.output, limit=100)}")
        elif isinstance(event, FileChange) and event.kind != "read":
            self._note(f"  {event.kind} {event.path}")
        elif isinstance(event, PermissionDecision) and event.decision == "deny":
            if not self._calls:  # a pending call's ✗ line says it (once)
                self._note(f"  denied: {one_line(event.reason)}")
        elif isinstance(event, Usage):
            self.input_tokens += event.input_tokens
            self.output_tokens += event.output_tokens
            self.cost = None if self.cost is None or event.cost_usd is None else self.cost + event.cost_usd
        elif isinstance(event, Error):
            if self.progress and self._calls and event.kind == "permission":
                return  # the refused call's ✗ line on the terminal says it
            retry = " (retrying)" if event.retryable and event.attempt else ""
            self._end_partial_line()
            self.err.write(f"seamline: {event.kind} error: {one_line(event.message)}{retry}\n")
        elif isinstance(event, Raw) and event.source == "handoff":
            self._end_partial_line()  # a failover (seamline.providers.failover): say who answers now
            to, model = _field(event.payload, "to"), _field(event.payload, "to_model")
            self.err.write(f"seamline: handed over to {to}{f' ({model})' if model else ''}, sending the turn again\n")
        elif isinstance(event, Complete):
            self._end_partial_line()
            cost = "cost unknown" if self.cost is None else f"${self.cost:.4f}"
            session = f" · session {self.session_id}" if self.session_id else ""
            self._note(
                f"[{event.outcome}: {event.stop_reason} · {self.input_tokens} in / {self.output_tokens} out tokens"
                f" · {cost}{session}]"
            )

    def _end_partial_line(self) -> None:
        """An answer cut short (abort, budget, error) ends its line before a note follows."""
        if self._streamed:
            self.out.write("\n")
            self.out.flush()
            self._streamed = False

    def _note(self, line: str) -> None:
        if self.progress:
            self.err.write(line + "\n")
            self.err.flush()

    def close(self) -> None:
        self._unspin()
        self.out.flush()


async def spin_while(display: JsonDisplay | TextDisplay, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """``events`` as they are; meanwhile a text display on a terminal shows a spinner with
    the elapsed time whenever nothing was shown for half a second (never with --json)."""
    if not isinstance(display, TextDisplay) or not display.progress:
        try:
            async for event in events:
                yield event
        finally:
            # Left early (an exception at the consumer), the inner generators are closed
            # here, in order: left to loop shutdown they are closed in any order and fail.
            await aclose_events(events)
        return

    async def ticks() -> None:
        while True:
            await asyncio.sleep(0.1)
            display.spin()

    ticker = asyncio.ensure_future(ticks())
    try:
        async for event in events:
            yield event
    finally:
        ticker.cancel()
        display.close()
        await aclose_events(events)


def show_journal_scans(display: JsonDisplay | TextDisplay, session: ProviderSession) -> None:
    """A text display on a terminal shows the edit journal's long scans of ``session``'s
    workspace (an agent CLI's or ACP agent's turn), which otherwise leave it silent."""
    if isinstance(display, TextDisplay) and display.progress:
        show_scans(session, display.scanning)


def _brief(arguments: dict[str, object]) -> str:
    parts = [f"{k}={v!r}" for k, v in arguments.items()]
    text = " ".join(parts)
    return text if len(text) <= 80 else text[:77] + "..."


def turn_ended(final: Complete, *, max_steps: int, display: JsonDisplay | TextDisplay) -> None:
    """The line on stderr for a turn that did not complete; running out of steps names the
    limit and the flag that raises it. On a terminal the display's summary line already said
    how the turn ended, so only the steps hint is added."""
    if final.outcome == "completed":
        return
    if final.stop_reason == "max_turns":
        print(
            f"seamline: turn failed: it used all {max_steps} steps (model calls) without an answer;"
            " raise the limit with --max-steps N",
            file=sys.stderr,
        )
        return
    if isinstance(display, TextDisplay) and display.progress:
        return
    print(f"seamline: turn {final.outcome} ({final.stop_reason})", file=sys.stderr)


def _field(payload: Any, key: str) -> object:
    """``payload[key]`` of a provider-native payload that may not be a mapping at all."""
    try:
        return payload.get(key)
    except AttributeError:
        return None
