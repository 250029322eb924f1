"""The event vocabulary: one tagged union, JSON in and out.

Every provider, the loop, a tool and the controller report what happens as events of
this union. On the wire each event is one JSON object whose ``type`` field names it;
the names and the core fields are a public contract (see ``docs/events.md``).

>>> from seamline.events import TextDelta, encode_event, decode_event
>>> decode_event(encode_event(TextDelta(text="hi")))
TextDelta(text='hi')
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

import msgspec

__all__ = [
    "EVENT_TYPES",
    "Complete",
    "Error",
    "ErrorKind",
    "Event",
    "FileChange",
    "FileChangeKind",
    "Mode",
    "Outcome",
    "PermissionDecision",
    "PermissionRequest",
    "Raw",
    "Reasoning",
    "ReasoningDelta",
    "Session",
    "Text",
    "TextDelta",
    "ToolCall",
    "ToolProgress",
    "ToolResult",
    "Usage",
    "decode_event",
    "encode_event",
    "event_schema",
]

ErrorKind: TypeAlias = Literal[
    "timeout",
    "auth",
    "quota",
    "transport",
    "provider",
    "invalid_request",
    "sandbox",
    "permission",
    "budget",
    "storage",
]
Outcome: TypeAlias = Literal["completed", "aborted", "failed", "budget"]
FileChangeKind: TypeAlias = Literal["read", "edited", "created", "deleted"]


class _Event(msgspec.Struct, kw_only=True, tag_field="type", frozen=True, gc=False):
    """Base of every event; ``type`` is the tag. Each event class narrows ``type`` to its
    own ``Literal``, so ``if event.type == "text_delta":`` narrows an :data:`Event` the way
    ``isinstance`` does."""

    @property
    def type(self) -> str:
        """The event's name in the vocabulary, as on the wire."""
        return str(self.__struct_config__.tag)


class Session(_Event, tag="session", frozen=True):
    """A turn started on a session: our id, the provider's id once known."""

    session_id: str
    provider: str
    model: str | None
    provider_session_id: str | None = None

    @property
    def type(self) -> Literal["session"]:
        return "session"


class TextDelta(_Event, tag="text_delta", frozen=True):
    text: str

    @property
    def type(self) -> Literal["text_delta"]:
        return "text_delta"


class Text(_Event, tag="text", frozen=True):
    """A finished block of assistant text (the deltas before it, joined)."""

    text: str

    @property
    def type(self) -> Literal["text"]:
        return "text"


class ReasoningDelta(_Event, tag="reasoning_delta", frozen=True):
    text: str

    @property
    def type(self) -> Literal["reasoning_delta"]:
        return "reasoning_delta"


class Reasoning(_Event, tag="reasoning", frozen=True):
    text: str

    @property
    def type(self) -> Literal["reasoning"]:
        return "reasoning"


class ToolCall(_Event, tag="tool_call", frozen=True):
    """The model asks for a tool. ``call_id`` is stable from call to result."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    source: str = "host"

    @property
    def type(self) -> Literal["tool_call"]:
        return "tool_call"


class ToolResult(_Event, tag="tool_result", frozen=True):
    call_id: str
    output: str
    is_error: bool = False
    name: str | None = None

    @property
    def type(self) -> Literal["tool_result"]:
        return "tool_result"


class ToolProgress(_Event, tag="tool_progress", frozen=True):
    call_id: str
    message: str

    @property
    def type(self) -> Literal["tool_progress"]:
        return "tool_progress"


class PermissionRequest(_Event, tag="permission_request", frozen=True):
    request_id: str
    call_id: str | None
    tool: str
    arguments: dict[str, Any]
    reason: str = ""

    @property
    def type(self) -> Literal["permission_request"]:
        return "permission_request"


class PermissionDecision(_Event, tag="permission_decision", frozen=True):
    request_id: str
    decision: Literal["allow", "deny"]
    scope: Literal["once", "session", "always"] = "once"
    reason: str = ""
    # Who answered: a server's user name, "user" (a terminal), "yes" (--yes) or "rule"
    # (a rule or the default policy); None where the answer came from elsewhere (an agent).
    by: str | None = None

    @property
    def type(self) -> Literal["permission_decision"]:
        return "permission_decision"


class FileChange(_Event, tag="file_change", frozen=True):
    path: str
    kind: FileChangeKind
    call_id: str | None = None

    @property
    def type(self) -> Literal["file_change"]:
        return "file_change"


class Usage(_Event, tag="usage", frozen=True):
    """Tokens and cost of one model call (or one turn, for agents that report per turn).

    ``input_tokens`` counts every input token, cached ones included; the cache read and
    write counts are parts of it. ``cost_usd`` is ``None`` and ``priced`` false when the
    model has no known price: unknown cost is never a silent zero.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    priced: bool = False
    model: str | None = None
    usage_id: str | None = None

    @property
    def type(self) -> Literal["usage"]:
        return "usage"


class Mode(_Event, tag="mode", frozen=True):
    mode: Literal["planning", "agent"]

    @property
    def type(self) -> Literal["mode"]:
        return "mode"


class Raw(_Event, tag="raw", frozen=True):
    """A provider-native payload, kept verbatim for the raw log."""

    source: str
    payload: Any

    @property
    def type(self) -> Literal["raw"]:
        return "raw"


class Error(_Event, tag="error", frozen=True):
    kind: ErrorKind
    message: str
    retryable: bool = False
    attempt: int | None = None

    @property
    def type(self) -> Literal["error"]:
        return "error"


class Complete(_Event, tag="complete", frozen=True):
    """The end of a turn; exactly one per turn. Abort is an outcome, not an error."""

    outcome: Outcome
    stop_reason: str
    text: str = ""

    @property
    def type(self) -> Literal["complete"]:
        return "complete"


Event: TypeAlias = (
    Session
    | TextDelta
    | Text
    | ReasoningDelta
    | Reasoning
    | ToolCall
    | ToolResult
    | ToolProgress
    | PermissionRequest
    | PermissionDecision
    | FileChange
    | Usage
    | Mode
    | Raw
    | Error
    | Complete
)

EVENT_TYPES: Final[tuple[str, ...]] = (
    "session",
    "text_delta",
    "text",
    "reasoning_delta",
    "reasoning",
    "tool_call",
    "tool_result",
    "tool_progress",
    "permission_request",
    "permission_decision",
    "file_change",
    "usage",
    "mode",
    "raw",
    "error",
    "complete",
)

_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder(Event)


def encode_event(event: Event) -> bytes:
    """One event as compact JSON bytes (no trailing newline)."""
    return _encoder.encode(event)


def decode_event(data: bytes | str) -> Event:
    """Parse one JSON event; raises ``msgspec.ValidationError`` or ``DecodeError``."""
    try:
        event: Event = _decoder.decode(data)
    except UnicodeDecodeError as exc:  # msgspec's error for such bytes inside a string
        raise msgspec.DecodeError(f"not UTF-8: {exc}") from None
    return event


def event_schema() -> dict[str, Any]:
    """The JSON Schema of the vocabulary, as written to ``docs/events.schema.json``."""
    schema: dict[str, Any] = msgspec.json.schema(Event)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "seamline event"
    return schema
