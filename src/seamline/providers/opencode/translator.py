"""OpenCode's server events of one session's turn, as seamline events (see
:class:`OpenCodeTranslator`)."""

from __future__ import annotations

from typing import Any

from seamline.errors import AuthFailure, ProviderFailure, QuotaExceeded, SeamlineError
from seamline.events import (
    Complete,
    Event,
    FileChange,
    Reasoning,
    ReasoningDelta,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from seamline.providers.base import ProviderSession

__all__ = ["OpenCodeTranslator"]


def _error(error: Any) -> SeamlineError | None:
    """A ``session.error`` payload as a classified failure; None for an abort."""
    if not isinstance(error, dict):
        return ProviderFailure(f"opencode: session error: {str(error)[:300]}")
    name = str(error.get("name") or "UnknownError")
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    assert isinstance(data, dict)
    message = str(data.get("message") or name)
    status = data.get("statusCode")
    text = f"opencode: {name}: {message}"
    if name == "MessageAbortedError":
        return None
    if name == "ProviderAuthError" or status in (401, 403):
        return AuthFailure(text)
    if status == 429:
        return QuotaExceeded(text)
    return ProviderFailure(text, retryable=bool(data.get("isRetryable")))


class OpenCodeTranslator:
    """OpenCode server events of one session's turn to seamline events.

    Parts of the user's own message are skipped. Text and reasoning arrive as
    ``message.part.delta`` (or as a longer ``text`` in ``message.part.updated``): the new
    part becomes a delta, the finished part a whole ``text`` / ``reasoning``. A tool part
    is announced once it is running (its input is known then) and settled when it is
    completed or in error. Each ``step-finish`` part is one model call's usage; OpenCode
    counts cached input apart from input, and reasoning apart from output, so both are
    added back. The turn ends when the session goes idle after it was busy.
    """

    def __init__(self, *, max_retries: int = 2) -> None:
        self.max_retries = max_retries
        self.retries = 0
        self.retries_exceeded = False
        self.done = False
        self.aborted = False
        self._busy = False
        self._user_messages: set[str] = set()
        self._part_kind: dict[str, str] = {}
        self._emitted: dict[str, int] = {}
        self._closed_parts: set[str] = set()
        self._calls: dict[str, ToolCall] = {}
        self._settled: set[str] = set()
        self._text_by_message: dict[str, dict[str, str]] = {}
        self._last_message: str | None = None
        #: the last step's finish reason (stop, tool-calls, length, …)
        self.stop_reason = "stop"

    def final_text(self) -> str:
        if self._last_message is None:
            return ""
        return "".join(self._text_by_message.get(self._last_message, {}).values())

    def feed(self, event: dict[str, Any]) -> list[Event]:
        kind = event.get("type")
        props = event.get("properties")
        if not isinstance(props, dict):
            return []
        if kind == "message.updated":
            info = props.get("info")
            if isinstance(info, dict) and info.get("role") == "user" and isinstance(info.get("id"), str):
                self._user_messages.add(info["id"])
            return []
        if kind == "message.part.updated":
            part = props.get("part")
            return self._part(part) if isinstance(part, dict) else []
        if kind == "message.part.delta":
            return self._delta(props)
        if kind == "session.status":
            status = props.get("status")
            state = status.get("type") if isinstance(status, dict) else None
            if state == "busy":
                self._busy = True
            elif state == "retry" and isinstance(status, dict):
                self.retries += 1
                if self.retries > self.max_retries:
                    self.retries_exceeded = True
                    raise ProviderFailure(
                        f"opencode: the model API failed and OpenCode retried {self.retries} times"
                        f" (our bound is {self.max_retries}): {str(status.get('message'))[:300]}",
                        retryable=True,
                    )
            elif state == "idle" and self._busy:
                self.done = True
            return []
        if kind == "session.idle":
            if self._busy:
                self.done = True
            return []
        if kind == "session.error":
            failure = _error(props.get("error"))
            if failure is None:
                self.aborted = True
                return []
            raise failure
        return []

    def _delta(self, props: dict[str, Any]) -> list[Event]:
        part_id = props.get("partID")
        message_id = props.get("messageID")
        delta = props.get("delta")
        if not isinstance(part_id, str) or not isinstance(delta, str) or message_id in self._user_messages:
            return []
        if props.get("field", "text") != "text" or not delta:
            return []
        self._busy = True
        kind = self._part_kind.get(part_id, "text")
        self._emitted[part_id] = self._emitted.get(part_id, 0) + len(delta)
        if kind == "text" and isinstance(message_id, str):
            texts = self._text_by_message.setdefault(message_id, {})
            texts[part_id] = texts.get(part_id, "") + delta
            self._last_message = message_id
        return [ReasoningDelta(text=delta) if kind == "reasoning" else TextDelta(text=delta)]

    def _part(self, part: dict[str, Any]) -> list[Event]:
        part_id = str(part.get("id") or "")
        message_id = part.get("messageID")
        if message_id in self._user_messages:
            return []
        kind = str(part.get("type") or "")
        self._part_kind[part_id] = kind
        if kind in ("text", "reasoning"):
            return self._text_part(part_id, kind, part, message_id)
        if kind == "tool":
            return self._tool_part(part)
        if kind == "step-finish":
            if isinstance(part.get("reason"), str):
                self.stop_reason = part["reason"]
            return [self._usage(part_id, part)]
        return []

    def _text_part(self, part_id: str, kind: str, part: dict[str, Any], message_id: Any) -> list[Event]:
        text = part.get("text")
        if not isinstance(text, str):
            return []
        events: list[Event] = []
        sent = self._emitted.get(part_id, 0)
        if len(text) > sent:
            rest = text[sent:]
            self._emitted[part_id] = len(text)
            events.append(ReasoningDelta(text=rest) if kind == "reasoning" else TextDelta(text=rest))
        if kind == "text" and isinstance(message_id, str):
            self._text_by_message.setdefault(message_id, {})[part_id] = text
            if text:
                self._last_message = message_id
        timing = part.get("time")
        ended = isinstance(timing, dict) and timing.get("end") is not None
        if ended and part_id not in self._closed_parts and text:
            self._closed_parts.add(part_id)
            events.append(Reasoning(text=text) if kind == "reasoning" else Text(text=text))
        return events

    def _tool_part(self, part: dict[str, Any]) -> list[Event]:
        call_id = str(part.get("callID") or part.get("id") or "")
        name = str(part.get("tool") or "tool")
        state = part.get("state") if isinstance(part.get("state"), dict) else {}
        assert isinstance(state, dict)
        status = state.get("status")
        events: list[Event] = []
        arguments = state.get("input") if isinstance(state.get("input"), dict) else {}
        assert isinstance(arguments, dict)
        if call_id not in self._calls and status in ("running", "completed", "error"):
            call = ToolCall(call_id=call_id, name=name, arguments=dict(arguments), source="opencode")
            self._calls[call_id] = call
            events.append(call)
        if call_id in self._calls and call_id not in self._settled and status in ("completed", "error"):
            self._settled.add(call_id)
            failed = status == "error"
            output = state.get("error") if failed else state.get("output")
            events.append(ToolResult(call_id=call_id, output=str(output or ""), is_error=failed, name=name))
            path = arguments.get("filePath")
            if not failed and isinstance(path, str) and name in ("read", "edit", "write"):
                events.append(FileChange(path=path, kind="read" if name == "read" else "edited", call_id=call_id))
        return events

    def _usage(self, part_id: str, part: dict[str, Any]) -> Usage:
        tokens = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
        assert isinstance(tokens, dict)
        cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
        assert isinstance(cache, dict)

        def n(source: dict[str, Any], key: str) -> int:
            value = source.get(key)
            return int(value) if isinstance(value, int | float) else 0

        read, write = n(cache, "read"), n(cache, "write")
        cost = part.get("cost")
        # OpenCode says 0 for a model it has no price for: that is "unknown", not "free".
        known = isinstance(cost, int | float) and cost > 0
        return Usage(
            input_tokens=n(tokens, "input") + read + write,
            output_tokens=n(tokens, "output") + n(tokens, "reasoning"),
            cache_read_tokens=read,
            cache_write_tokens=write,
            cost_usd=float(cost) if known and isinstance(cost, int | float) else None,
            priced=known,
            usage_id=f"opencode:{part_id}",
        )

    def finish(self, *, session: ProviderSession) -> list[Event]:
        text = self.final_text()
        if self.aborted or session.aborted:
            return [Complete(outcome="aborted", stop_reason="cancelled", text=text)]
        return [Complete(outcome="completed", stop_reason=self.stop_reason, text=text)]
