"""The base of every agent-CLI stream parser.

A parser is fed the program's stdout one line at a time and returns the events each line
means. It never raises: a line that is not JSON, not an object, or not a frame it knows
becomes a ``raw`` event; a frame that says something failed becomes a classified
``error``. The turn's single ``complete`` comes from :meth:`StreamParser.finish`, once the
program has exited, so a parser's verdict can take the exit code and stderr into account.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Final

import msgspec

from seamline.events import Complete, Error, ErrorKind, Event, Outcome, Raw

__all__ = ["StreamParser", "classify_http_status", "classify_message"]

_decode: Final = msgspec.json.Decoder().decode
_STATUS_IN_TEXT: Final = re.compile(r"\b(4\d\d|5\d\d)\b")


def classify_http_status(status: int | None) -> tuple[ErrorKind, bool]:
    """The error kind and retryability of an HTTP status (``None``: nothing answered)."""
    if status is None:
        return "transport", True
    if status in (401, 403):
        return "auth", False
    if status == 429:
        return "quota", True
    if status in (408, 504):
        return "timeout", True
    if status in (400, 404, 413, 422):
        return "invalid_request", False
    if status >= 500:
        return "provider", True
    return "provider", False


def classify_message(message: str) -> tuple[ErrorKind, bool]:
    """Best guess at a kind from an error text that embeds an HTTP status or a known phrase."""
    lowered = message.lower()
    if "overloaded" in lowered or "high demand" in lowered:
        return "provider", True
    if "rate limit" in lowered or "quota" in lowered or "resource_exhausted" in lowered:
        return "quota", True
    if any(
        s in lowered
        for s in ("unauthorized", "unauthenticated", "api key", "authentication", "not logged in", "auth method")
    ):
        return "auth", False
    match = _STATUS_IN_TEXT.search(message)
    if match is not None:
        return classify_http_status(int(match.group(1)))
    if any(
        s in lowered
        for s in ("econnrefused", "connection", "fetch failed", "network", "stream", "disconnected", "terminated")
    ):
        return "transport", True
    if "timeout" in lowered or "timed out" in lowered:
        return "timeout", True
    return "provider", False


class StreamParser:
    """Turns one CLI's output lines into events. Subclasses implement :meth:`_frame`.

    State a driver reads: ``provider_session_id`` (once seen), ``retries`` (API retries the
    program reported, for the driver's own retry bound), ``outcome`` (set by a terminal frame).
    """

    source: ClassVar[str] = "cli"

    def __init__(self, *, model: str | None = None) -> None:
        self.model = model
        self.provider_session_id: str | None = None
        self.retries = 0
        self.outcome: Outcome | None = None
        self.stop_reason = ""
        self.final_text = ""
        self.errors: list[Error] = []
        self.terminal_seen = False
        self.lines = 0
        #: set by the driver once it has asked the program to stop: a failure that follows is the abort
        self.aborting = False

    # -- feeding -----------------------------------------------------------------------
    def feed(self, line: bytes | str) -> list[Event]:
        """The events one output line means; never raises."""
        self.lines += 1
        if isinstance(line, str):
            line = line.encode("utf-8", "surrogatepass")
        stripped = line.strip()
        if not stripped:
            return []
        try:
            frame = _decode(stripped)
        except (msgspec.DecodeError, UnicodeDecodeError):
            return [Raw(source=self.source, payload={"unparsed": stripped.decode("utf-8", "replace")})]
        if not isinstance(frame, dict):
            return [Raw(source=self.source, payload=frame)]
        if self.terminal_seen:
            # Nothing after the terminal frame changes the turn; keep it verbatim.
            return [Raw(source=self.source, payload=frame)]
        try:
            return self._frame(frame)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, msgspec.ValidationError):
            return [Raw(source=self.source, payload=frame)]

    def _frame(self, frame: dict[str, Any]) -> list[Event]:
        raise NotImplementedError

    def _error(self, kind: ErrorKind, message: str, *, retryable: bool = False, attempt: int | None = None) -> Error:
        error = Error(kind=kind, message=message, retryable=retryable, attempt=attempt)
        if attempt is None:
            self.errors.append(error)
        return error

    # -- ending ------------------------------------------------------------------------
    def finish(
        self,
        *,
        returncode: int | None,
        stderr: str = "",
        aborted: bool = False,
        timed_out: str | None = None,
    ) -> list[Event]:
        """The events that end the turn, the last one its only ``complete``."""
        events: list[Event] = []
        if aborted:
            return [Complete(outcome="aborted", stop_reason="aborted", text=self.final_text)]
        if timed_out is not None:
            events.append(Error(kind="timeout", message=timed_out, retryable=True))
            return [*events, Complete(outcome="failed", stop_reason="timeout", text=self.final_text)]
        if self.outcome is None:
            events.extend(self._missing_result(returncode, stderr))
            stop = events[-1].kind if events and isinstance(events[-1], Error) else "no_result"
            return [*events, Complete(outcome="failed", stop_reason=stop, text=self.final_text)]
        return [Complete(outcome=self.outcome, stop_reason=self.stop_reason or self.outcome, text=self.final_text)]

    def _missing_result(self, returncode: int | None, stderr: str) -> list[Event]:
        """Errors for a stream that ended without its terminal frame."""
        if self.errors:
            return []
        tail = _last_line(stderr)
        what = f"exit code {returncode}" if returncode is not None else "no exit code"
        message = f"the program ended without a result ({what})" + (f": {tail}" if tail else "")
        kind, retryable = classify_message(tail) if tail else ("provider", False)
        return [self._error(kind, message, retryable=retryable)]


def _last_line(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line:
            return line[:500]
    return ""


def text_of(content: Any) -> str:
    """Tool output as text: a string as is, a list of content blocks joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, dict):
                if block.get("type") == "text":
                    parts.append(str(block.get("text", "")))
                else:
                    parts.append(f"[{block.get('type', 'block')}]")
            else:
                parts.append(str(block))
        return "\n".join(parts)
    return msgspec.json.encode(content).decode()


def as_int(value: Any) -> int:
    """A token count from a frame: an int, or 0 for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
