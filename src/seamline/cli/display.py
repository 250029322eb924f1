"""How a run looks: one JSON event per line, or text with live progress on a terminal."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from typing import TextIO

from seamline.events import (
    Complete,
    Error,
    Event,
    FileChange,
    PermissionDecision,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
    encode_event,
)

__all__ = ["JsonDisplay", "TextDisplay", "one_line"]

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


class JsonDisplay:
    """Every event as one compact JSON line on stdout, nothing else."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self._out = out.buffer if hasattr(out, "buffer") else None
        self._text_out = out

    def show(self, event: Event) -> None:
        data = encode_event(event) + b"\n"
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

    def show(self, event: Event) -> None:
        kind = type(event)
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
            self.err.write(f"seamline: {event.kind} error: {one_line(event.message)}{retry}\n")
        elif isinstance(event, Complete):
            cost = "cost unknown" if self.cost is None else f"${self.cost:.4f}"
            self._note(
                f"[{event.outcome}: {event.stop_reason} · {self.input_tokens} in / {self.output_tokens} out tokens · {cost}]"
            )

    def _note(self, line: str) -> None:
        if self.progress:
            self.err.write(line + "\n")
            self.err.flush()

    def close(self) -> None:
        self.out.flush()


def _brief(arguments: dict[str, object]) -> str:
    parts = [f"{k}={v!r}" for k, v in arguments.items()]
    text = " ".join(parts)
    return text if len(text) <= 80 else text[:77] + "..."
