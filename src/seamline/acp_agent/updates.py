"""seamline events to ACP ``session/update`` payloads, and the turn's end to a prompt result.

:class:`UpdateTranslator` turns the events of one turn into the ``update`` objects of
``session/update`` notifications:

- ``text_delta`` / ``text`` → ``agent_message_chunk`` (a ``text`` that only closes
  deltas already sent is not sent again), ``reasoning_delta`` / ``reasoning`` →
  ``agent_thought_chunk`` the same way;
- ``tool_call`` → ``tool_call`` (pending, with ``rawInput`` and a kind from the tool's
  class), ``tool_progress`` → ``tool_call_update`` in progress, ``file_change`` →
  ``tool_call_update`` with every location of the call so far (absolute paths),
  ``tool_result`` → ``tool_call_update`` completed or failed with the output;
- ``mode`` → ``current_mode_update``; ``usage`` → ``usage_update`` (the session's cost so
  far where every step was priced; an unknown cost is left out, never 0).

:func:`prompt_result` maps the ``complete`` event: completed → ``end_turn``, aborted →
``cancelled``, budget → ``cancelled`` (``_meta.seamline.outcome`` says budget), a failed
turn that hit the step limit → ``max_turn_requests``; any other failure is a JSON-RPC
error (see :func:`turn_error`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, assert_never

from seamline.errors import SeamlineError
from seamline.events import (
    Complete,
    Error,
    Event,
    FileChange,
    Mode,
    PermissionDecision,
    PermissionRequest,
    Raw,
    Reasoning,
    ReasoningDelta,
    Session,
    Text,
    TextDelta,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
)
from seamline.sessions.records import TranscriptEntry
from seamline.tools.base import Toolset
from seamline.transport.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, JsonRpcError

__all__ = ["AUTH_REQUIRED", "RESOURCE_NOT_FOUND", "UpdateTranslator", "history_updates", "prompt_result", "turn_error"]

AUTH_REQUIRED: Final = -32000
RESOURCE_NOT_FOUND: Final = -32002

# seamline tool classes as ACP tool kinds.
_CLASS_KIND: Final[dict[str, str]] = {"read": "read", "write": "edit", "execute": "execute", "network": "fetch"}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _content(text: str) -> list[dict[str, Any]]:
    return [{"type": "content", "content": _text(text)}] if text else []


@dataclass
class UpdateTranslator:
    """The updates of one session's turns (keeps the session's running cost)."""

    workspace: Path
    tools: Toolset | None = None
    session_cost: float | None = 0.0
    _open_text: bool = False
    _open_thought: bool = False
    _locations: dict[str, list[str]] = field(default_factory=dict)
    last_error: Error | None = None

    def begin_turn(self) -> None:
        self._open_text = self._open_thought = False
        self._locations.clear()
        self.last_error = None

    def updates(self, event: Event) -> list[dict[str, Any]]:
        """The ``update`` objects for one event (often none)."""
        match event:
            case TextDelta(text=text):
                self._open_text = True
                return [{"sessionUpdate": "agent_message_chunk", "content": _text(text)}] if text else []
            case Text(text=text):
                if self._open_text:
                    self._open_text = False  # it closes the deltas already sent
                    return []
                return [{"sessionUpdate": "agent_message_chunk", "content": _text(text)}] if text else []
            case ReasoningDelta(text=text):
                self._open_thought = True
                return [{"sessionUpdate": "agent_thought_chunk", "content": _text(text)}] if text else []
            case Reasoning(text=text):
                if self._open_thought:
                    self._open_thought = False
                    return []
                return [{"sessionUpdate": "agent_thought_chunk", "content": _text(text)}] if text else []
            case ToolCall():
                return [self._tool_call(event)]
            case ToolProgress(call_id=call_id, message=message):
                return [
                    {
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": call_id,
                        "status": "in_progress",
                        "content": _content(message),
                    }
                ]
            case FileChange(call_id=call_id, path=path):
                if not call_id:
                    return []
                where = Path(path) if Path(path).is_absolute() else self.workspace / path
                seen = self._locations.setdefault(call_id, [])
                if str(where) not in seen:
                    seen.append(str(where))
                return [
                    {
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": call_id,
                        "locations": [{"path": p} for p in seen],
                    }
                ]
            case ToolResult(call_id=call_id, output=output, is_error=is_error):
                return [
                    {
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": call_id,
                        "status": "failed" if is_error else "completed",
                        "content": _content(output),
                        "rawOutput": output,
                    }
                ]
            case Mode(mode=mode):
                return [{"sessionUpdate": "current_mode_update", "currentModeId": mode}]
            case Usage():
                return [self._usage(event)]
            case Error():
                self.last_error = event
                return []
            case Session() | PermissionRequest() | PermissionDecision() | Raw() | Complete():
                # The permission request travels as session/request_permission; the rest has
                # no ACP update (the complete becomes the prompt's result).
                return []
            case _:
                assert_never(event)

    def _tool_call(self, call: ToolCall) -> dict[str, Any]:
        tool = self.tools.get(call.name) if self.tools is not None else None
        return {
            "sessionUpdate": "tool_call",
            "toolCallId": call.call_id,
            "title": call.name,
            "kind": tool_kind(tool.tool_class if tool is not None else None),
            "status": "pending",
            "rawInput": call.arguments,
        }

    def _usage(self, usage: Usage) -> dict[str, Any]:
        if self.session_cost is not None:
            self.session_cost = None if usage.cost_usd is None else self.session_cost + usage.cost_usd
        # seamline does not know the model's context window: size 0 says "unknown".
        update: dict[str, Any] = {
            "sessionUpdate": "usage_update",
            "used": usage.input_tokens + usage.output_tokens,
            "size": 0,
        }
        if self.session_cost is not None:
            update["cost"] = {"amount": self.session_cost, "currency": "USD"}
        return update


def tool_kind(tool_class: str | None) -> str:
    return _CLASS_KIND.get(tool_class or "", "other")


def prompt_usage(usages: Sequence[Usage]) -> dict[str, Any] | None:
    """The turn's token counts in ACP's terms (additive: cached input is not in input)."""
    if not usages:
        return None
    cache_read = sum(u.cache_read_tokens for u in usages)
    cache_write = sum(u.cache_write_tokens for u in usages)
    fresh = max(sum(u.input_tokens for u in usages) - cache_read - cache_write, 0)
    output = sum(u.output_tokens for u in usages)
    return {
        "totalTokens": fresh + cache_read + cache_write + output,
        "inputTokens": fresh,
        "outputTokens": output,
        "cachedReadTokens": cache_read,
        "cachedWriteTokens": cache_write,
    }


def prompt_result(final: Complete, usages: Sequence[Usage], *, error: Error | None) -> dict[str, Any]:
    """The ``session/prompt`` result for a turn that ended ``final``; raises
    :class:`JsonRpcError` for a failed turn (other than the step limit)."""
    if final.outcome == "completed":
        stop = "end_turn"
    elif final.outcome in ("aborted", "budget"):
        stop = "cancelled"
    elif final.stop_reason == "max_turns":
        stop = "max_turn_requests"
    else:
        raise turn_error(final, error)
    result: dict[str, Any] = {
        "stopReason": stop,
        "_meta": {"seamline": {"outcome": final.outcome, "stopReason": final.stop_reason}},
    }
    usage = prompt_usage(usages)
    if usage is not None:
        result["usage"] = usage
    return result


def turn_error(final: Complete, error: Error | None) -> JsonRpcError:
    """A failed turn as a JSON-RPC error: auth → -32000 (ACP's auth_required), an invalid
    request → -32602, the rest → -32603; ``data`` holds the classified error."""
    kind = error.kind if error is not None else "provider"
    message = error.message if error is not None else f"the turn failed ({final.stop_reason})"
    code = AUTH_REQUIRED if kind == "auth" else INVALID_PARAMS if kind == "invalid_request" else INTERNAL_ERROR
    retryable = error.retryable if error is not None else False
    data = {"kind": kind, "message": message, "retryable": retryable, "stopReason": final.stop_reason}
    return JsonRpcError(code, f"{kind} error: {message}", data)


def error_for(exc: SeamlineError) -> JsonRpcError:
    """A classified failure outside a turn (opening a session, …) as a JSON-RPC error."""
    code = AUTH_REQUIRED if exc.kind == "auth" else INVALID_PARAMS if exc.kind == "invalid_request" else INTERNAL_ERROR
    return JsonRpcError(code, f"{exc.kind} error: {exc.message}", {"kind": exc.kind, "message": exc.message})


def history_updates(
    entries: Sequence[TranscriptEntry], *, workspace: Path, tools: Toolset | None = None
) -> list[dict[str, Any]]:
    """A stored conversation replayed as updates (``session/load``); a tool call's kind
    comes from ``tools`` (the session's), as it did live."""
    out: list[dict[str, Any]] = []
    locations: dict[str, list[dict[str, str]]] = {}
    for entry in entries:
        if entry.kind == "file_change" and entry.call_id and isinstance(entry.data.get("path"), str):
            seen = locations.setdefault(entry.call_id, [])
            path = Path(str(entry.data["path"]))
            seen.append({"path": str(path if path.is_absolute() else workspace / path)})
            out.append({"sessionUpdate": "tool_call_update", "toolCallId": entry.call_id, "locations": list(seen)})
        elif entry.kind == "user":
            out.append({"sessionUpdate": "user_message_chunk", "content": _text(entry.content)})
        elif entry.kind == "assistant" and entry.content:
            out.append({"sessionUpdate": "agent_message_chunk", "content": _text(entry.content)})
        elif entry.kind == "reasoning" and entry.content:
            out.append({"sessionUpdate": "agent_thought_chunk", "content": _text(entry.content)})
        elif entry.kind == "tool_call" and entry.call_id:
            name = str(entry.data.get("name") or "tool")
            arguments = entry.data.get("arguments")
            tool = tools.get(name) if tools is not None else None
            out.append(
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": entry.call_id,
                    "title": name,
                    "kind": tool_kind(tool.tool_class if tool is not None else None),
                    "status": "pending",
                    "rawInput": arguments if isinstance(arguments, dict) else {},
                }
            )
        elif entry.kind == "tool_result" and entry.call_id:
            failed = bool(entry.data.get("is_error"))
            out.append(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": entry.call_id,
                    "status": "failed" if failed else "completed",
                    "content": _content(entry.content),
                }
            )
    return out
