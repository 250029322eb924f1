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

from seamline.events import Complete, Error, ErrorKind, Event, Outcome, Raw, Text, TextDelta

__all__ = ["StreamParser", "classify_http_status", "classify_message"]

_decode: Final = msgspec.json.Decoder().decode
_STATUS_IN_TEXT: Final = re.compile(r"\b(4\d\d|5\d\d)\b")
# Stderr lines that never name the cause of a failure: stack frames, and notices the CLIs
# print on every run (Codex's stdin note and PATH warning, Gemini's terminal and ripgrep notes).
_STDERR_NOISE: Final = re.compile(
    r"^(at |\d+: |Stack backtrace:|Reading additional input from stdin|WARNING: proceeding|Warning: 256-color"
    r"|Ripgrep is not available|YOLO mode is enabled|Loaded cached credentials|Data collection is disabled)"
)
_STDERR_ERROR: Final = re.compile(r"error|failed|exception|not found|no such|invalid|denied|refused", re.IGNORECASE)
# Phrases of a resume or fork whose session the CLI does not know.
_UNKNOWN_SESSION: Final = (
    "no rollout found",
    "no conversation found",
    "no session found",
    "session not found",
    "invalid session identifier",
    "could not find session",
    "no previous sessions found",
)


def classify_http_status(status: int | None) -> tuple[ErrorKind, bool]:
    """The error kind and retryability of an HTTP status (``None``: nothing answered)."""
    if status is None:
        return "transport", True
    if status == 529:
        return "provider", True  # Anthropic's "overloaded"
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
    if any(phrase in lowered for phrase in _UNKNOWN_SESSION):
        return "invalid_request", False
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
        #: the program said it ends after this turn (it had no conversation to resume): a warm
        #: process is not kept, even while it is still on its way out
        self.process_ends = False
        #: set by the driver once it has asked the program to stop: a failure that follows is the abort
        self.aborting = False
        #: the kind of the failure behind the last counted retry (what a give-up reports)
        self.retry_kind: ErrorKind = "transport"
        self._said: list[str] = []
        self._open_deltas: list[str] = []

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
            events = self._frame(frame)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, msgspec.ValidationError):
            return [Raw(source=self.source, payload=frame)]
        for event in events:
            # What streamed, kept for a turn that ends without its final text (an abort).
            if isinstance(event, TextDelta):
                self._open_deltas.append(event.text)
            elif isinstance(event, Text):
                self._open_deltas = []
                self._said.append(event.text)
        return events

    def continue_from(self, carried: dict[str, Any]) -> None:
        """Take what the previous turn's parser left (:meth:`carry_over`) when the turn runs
        on the same live process (running totals the program reports per process)."""
        return None

    def carry_over(self) -> dict[str, Any]:
        """What the next turn's parser on the same live process needs from this one."""
        return {}

    def watch_stderr(self, tail: str) -> list[Event]:
        """Called now and then with the program's latest stderr; a CLI that reports its
        retries only there counts them here (``retries`` must only grow)."""
        return []

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
        gave_up: str | None = None,
    ) -> list[Event]:
        """The events that end the turn, the last one its only ``complete``.

        ``timed_out``: the driver's turn timeout ended the program; ``gave_up``: the driver's
        retry bound did (the turn failed for the cause behind those retries, not by time).
        """
        events: list[Event] = self._close_text() if self.outcome is None or aborted else []
        text = self.final_text or self._partial_text()
        if aborted:
            return [*events, Complete(outcome="aborted", stop_reason="aborted", text=text)]
        if timed_out is not None:
            events.append(Error(kind="timeout", message=timed_out, retryable=True))
            return [*events, Complete(outcome="failed", stop_reason="timeout", text=text)]
        if gave_up is not None:
            events.append(Error(kind=self.retry_kind, message=gave_up, retryable=True))
            return [*events, Complete(outcome="failed", stop_reason=self.retry_kind, text=text)]
        if self.outcome is None:
            missing = self._missing_result(returncode, stderr)
            events.extend(missing)
            cause = self.errors[0] if self.errors else None
            stop = cause.kind if cause is not None else "no_result"
            return [*events, Complete(outcome="failed", stop_reason=stop, text=text)]
        return [*events, Complete(outcome=self.outcome, stop_reason=self.stop_reason or self.outcome, text=text)]

    def _close_text(self) -> list[Event]:
        """A closing ``text`` for deltas that streamed without one (the turn was cut short)."""
        if not self._open_deltas:
            return []
        text = "".join(self._open_deltas)
        self._open_deltas = []
        self._said.append(text)
        return [Text(text=text)]

    def _partial_text(self) -> str:
        """The answer so far, for a turn that ended before its final text."""
        if self._open_deltas:
            return "".join(self._open_deltas)
        return self._said[-1] if self._said else ""

    def _missing_result(self, returncode: int | None, stderr: str) -> list[Event]:
        """Errors for a stream that ended without its terminal frame."""
        if self.errors:
            return []
        cause = self._stderr_cause(stderr)
        what = f"exit code {returncode}" if returncode is not None else "no exit code"
        message = f"the program ended without a result ({what})" + (f": {cause}" if cause else "")
        kind, retryable = classify_message(cause) if cause else ("provider", False)
        return [self._error(kind, message, retryable=retryable)]

    def _stderr_cause(self, stderr: str) -> str:
        """The stderr line that names the error: the last that reads like one and is not a
        stack frame or a routine notice; else the last line that is not noise."""
        lines = [line.strip() for line in stderr.splitlines()]
        lines = [line for line in lines if line and not _STDERR_NOISE.match(line)]
        for line in reversed(lines):
            if _STDERR_ERROR.search(line):
                return line[:500]
        return lines[-1][:500] if lines else ""


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
