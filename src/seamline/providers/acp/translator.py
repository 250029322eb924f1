"""The ``acp`` provider's translation: the ``session/update`` payloads of one turn to events."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from seamline.events import (
    Complete,
    Event,
    FileChange,
    Mode,
    Reasoning,
    ReasoningDelta,
    Text,
    TextDelta,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
)
from seamline.providers.acp.agent_process import merge_tool_call, tool_arguments, tool_name
from seamline.providers.base import ProviderSession

__all__ = ["PERMISSION_ANNOUNCE", "AcpTranslator"]

# A queue item of our own: announce the call a permission request is about, in order.
PERMISSION_ANNOUNCE: Final = "_seamline_permission"


def _encode(message: object) -> str:
    return msgspec.json.encode(message).decode()


def _content_text(content: Any) -> str:
    """The text of ACP tool-call content (``content`` blocks, diffs, terminals)."""
    parts: list[str] = []
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, dict):
            continue
        inner = item.get("content")
        if item.get("type") == "content" and isinstance(inner, dict) and isinstance(inner.get("text"), str):
            parts.append(inner["text"])
        elif item.get("type") == "diff":
            parts.append(f"diff {item.get('path')}")
    return "\n".join(parts)


class AcpTranslator:
    """``session/update`` payloads of one turn to seamline events.

    A tool call is reported once its arguments are known (claude-agent-acp sends an empty
    ``rawInput`` first and the real one in an update, OpenCode only its ``cwd``: later
    ``rawInput`` is merged in), or when a permission request or a status change needs it,
    named by the agent's own tool name; its result comes with status ``completed`` or
    ``failed``. Text streamed before a tool call ends there as its own ``text`` block.
    Plans become ``reasoning`` text; ``current_mode_update`` becomes ``mode``. The
    agent's cost in ``usage_update`` is cumulative over the session: the turn's cost is
    the difference.
    """

    def __init__(self) -> None:
        self.calls: dict[str, ToolCall] = {}
        self.pending: dict[str, dict[str, Any]] = {}
        self.first_title: dict[str, str] = {}
        self.finished: set[str] = set()
        self.read_paths: dict[str, set[str]] = {}
        self._text: list[str] = []  # the text block being streamed now
        self._last_block = ""  # the last block closed by a tool call
        self._reasoning: list[str] = []
        self.session_cost: float | None = None

    def text(self) -> str:
        """The turn's final text: the block after the last tool call (or before it, if none followed)."""
        return "".join(self._text) or self._last_block

    def close_text(self) -> list[Event]:
        """End the text block streamed so far (a tool call or the end of the turn follows)."""
        block = "".join(self._text)
        self._text.clear()
        if not block:
            return []
        self._last_block = block
        return [Text(text=block)]

    def feed(self, item: dict[str, Any] | list[Event]) -> list[Event]:
        if isinstance(item, list):
            return item
        kind = item.get("sessionUpdate")
        if kind == "agent_message_chunk":
            text = _chunk_text(item)
            if text:
                self._text.append(text)
                return [TextDelta(text=text)]
        elif kind == "agent_thought_chunk":
            text = _chunk_text(item)
            if text:
                self._reasoning.append(text)
                return [ReasoningDelta(text=text)]
        elif kind in ("tool_call", "tool_call_update"):
            return self.tool_update(item, announce=False)
        elif kind == PERMISSION_ANNOUNCE:
            call = item.get("toolCall")
            return self.tool_update(call, announce=True) if isinstance(call, dict) else []
        elif kind == "plan":
            entries = [e for e in item.get("entries") or [] if isinstance(e, dict)]
            lines = [f"- [{e.get('status', 'pending')}] {e.get('content', '')}" for e in entries]
            return [Reasoning(text="Plan:\n" + "\n".join(lines))]
        elif kind == "current_mode_update":
            mode = str(item.get("currentModeId") or "")
            return [Mode(mode="planning" if "plan" in mode.lower() else "agent")]
        elif kind == "usage_update":
            cost = item.get("cost")
            if isinstance(cost, dict) and isinstance(cost.get("amount"), int | float):
                if str(cost.get("currency", "USD")).upper() == "USD":
                    self.session_cost = float(cost["amount"])
        # user_message_chunk (history replay), available_commands_update, config and
        # session info updates: kept in the raw log only.
        return []

    def tool_update(self, item: dict[str, Any], *, announce: bool) -> list[Event]:
        call_id = str(item.get("toolCallId") or "")
        if not call_id:
            return []
        merged = self.pending.setdefault(call_id, {})
        if item.get("sessionUpdate") == "tool_call" and isinstance(item.get("title"), str):
            self.first_title.setdefault(call_id, item["title"])
        merge_tool_call(merged, item)
        events: list[Event] = []
        status = merged.get("status")
        # The first announcement may carry placeholder arguments (OpenCode: only the cwd);
        # the call is reported once an update brings the real ones or the tool starts.
        brings_input = item.get("sessionUpdate") != "tool_call" and bool(item.get("rawInput"))
        ready = announce or brings_input or status in ("in_progress", "completed", "failed")
        if call_id not in self.calls and ready:
            events.extend(self.close_text())
            name = tool_name(merged, first_title=self.first_title.get(call_id))
            call = ToolCall(call_id=call_id, name=name, arguments=tool_arguments(merged, name), source="acp")
            self.calls[call_id] = call
            events.append(call)
        if call_id in self.calls:
            events.extend(self._reads(merged, call_id))
        if item.get("status") == "in_progress" and call_id in self.calls and item.get("title"):
            events.append(ToolProgress(call_id=call_id, message=str(item["title"])))
        if status in ("completed", "failed") and call_id not in self.finished and call_id in self.calls:
            self.finished.add(call_id)
            output = merged.get("rawOutput")
            text = output if isinstance(output, str) else _content_text(merged.get("content"))
            if not text and output is not None:
                text = _encode(output) if isinstance(output, dict | list) else str(output)
            events.append(
                ToolResult(call_id=call_id, output=text, is_error=status == "failed", name=self.calls[call_id].name)
            )
        return events

    def _reads(self, call: dict[str, Any], call_id: str) -> list[Event]:
        """The files an agent's own read (kind ``read``) names in its ``locations``, each once,
        as ``file_change`` read events, as the agent CLIs' reads are reported."""
        locations = call.get("locations")
        if call.get("kind") != "read" or not isinstance(locations, list):
            return []
        seen = self.read_paths.setdefault(call_id, set())
        events: list[Event] = []
        for loc in locations:
            path = loc.get("path") if isinstance(loc, dict) else None
            if isinstance(path, str) and path and path not in seen:
                seen.add(path)
                events.append(FileChange(path=path, kind="read", call_id=call_id))
        return events

    def closing(self) -> list[Event]:
        """The closing ``reasoning`` and ``text`` of what streamed (a finished or aborted turn)."""
        events: list[Event] = []
        if self._reasoning:
            events.append(Reasoning(text="".join(self._reasoning)))
            self._reasoning.clear()
        events.extend(self.close_text())
        return events

    def aborted(self) -> list[Event]:
        """An aborted turn's end: what streamed stays (closing text, ``complete.text``)."""
        events = self.closing()
        events.append(Complete(outcome="aborted", stop_reason="cancelled", text=self.text()))
        return events

    def finish(self, result: Any, *, session: ProviderSession) -> list[Event]:
        result = result if isinstance(result, dict) else {}
        stop = str(result.get("stopReason") or "end_turn")
        events = self.closing()
        text = self.text()
        usage = self._usage(result.get("usage"), session, meta=result.get("_meta"))
        if usage is not None:
            events.append(usage)
        outcome = "aborted" if stop == "cancelled" or session.aborted else "completed"
        events.append(Complete(outcome=outcome, stop_reason=stop, text=text))  # type: ignore[arg-type]
        return events

    def _usage(self, raw: Any, session: ProviderSession, *, meta: Any = None) -> Usage | None:
        state = session.state
        cost: float | None = None
        if self.session_cost is not None:
            before = state.get("acp_session_cost", 0.0)
            cost = max(self.session_cost - (float(before) if isinstance(before, int | float) else 0.0), 0.0)
            state["acp_session_cost"] = self.session_cost
        if not isinstance(raw, dict):
            raw = _quota_usage(meta)
        if raw is None and cost is None:
            return None
        raw = raw if isinstance(raw, dict) else {}

        def n(key: str) -> int:
            value = raw.get(key)
            return int(value) if isinstance(value, int | float) else 0

        cache_read, cache_write = n("cachedReadTokens"), n("cachedWriteTokens")
        # ACP's counts are additive (totalTokens is their sum); ours count cached input in input.
        return Usage(
            input_tokens=n("inputTokens") + cache_read + cache_write,
            output_tokens=n("outputTokens") + n("thoughtTokens"),
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            cost_usd=cost,
            priced=cost is not None,
            model=session.provider.model,
            usage_id=f"acp:{session.provider_session_id}:{session.turn}",
        )


def _quota_usage(meta: Any) -> dict[str, int] | None:
    """``gemini --acp`` reports its tokens in ``result._meta.quota.token_count``, not ``usage``."""
    quota = meta.get("quota") if isinstance(meta, dict) else None
    counts = quota.get("token_count") if isinstance(quota, dict) else None
    if not isinstance(counts, dict):
        return None

    def n(key: str) -> int:
        value = counts.get(key)
        return int(value) if isinstance(value, int | float) else 0

    # Gemini's input count holds its cached tokens already; seamline's does too.
    cached = n("cached_input_tokens") or n("cached_tokens")
    return {
        "inputTokens": n("input_tokens") - cached,
        "outputTokens": n("output_tokens"),
        "thoughtTokens": n("thoughts_tokens") or n("reasoning_tokens"),
        "cachedReadTokens": cached,
    }


def _chunk_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str):
        return str(content["text"])
    return ""
