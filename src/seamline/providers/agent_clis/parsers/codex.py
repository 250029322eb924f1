"""Codex's ``codex exec --json`` (JSONL thread events), as the program prints it.

Frames: ``thread.started`` (``thread_id``: the session id), ``turn.started``,
``item.started`` / ``item.updated`` / ``item.completed`` (items: ``agent_message``,
``reasoning``, ``command_execution``, ``file_change``, ``mcp_tool_call``, ``web_search``,
``todo_list``, ``error``), ``turn.completed`` (token usage for the whole turn, no cost),
``turn.failed``, and top-level ``error``. Messages arrive whole: there are no text deltas.
A top-level ``error`` whose message starts ``Reconnecting...`` is a retry notice; others are
provisional until ``turn.failed`` (or recovered by a ``turn.completed``). A notice numbered
``n/m`` is one of Codex's own bounded retries (a failed WebSocket, before it falls back to
HTTP and goes on): progress, not a verdict. ``Reconnecting... waiting for network`` is what an
unreachable endpoint gives, for ever: those count against the driver's retry bound.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Final

from seamline.events import (
    Error,
    Event,
    FileChange,
    FileChangeKind,
    Raw,
    Reasoning,
    Session,
    Text,
    ToolCall,
    ToolResult,
    Usage,
)
from seamline.providers.agent_clis.parsers.base import StreamParser, as_int, classify_message

__all__ = ["CodexJsonParser", "mcp_output_text"]

_NOTICE: Final = re.compile(r"^Reconnecting\.\.\.\s*(?:(\d+)/(\d+))?\s*(.*)$", re.DOTALL)
_CHANGE_KINDS: Final[dict[str, FileChangeKind]] = {"add": "created", "delete": "deleted", "update": "edited"}


class CodexJsonParser(StreamParser):
    """Parser for ``codex exec --json``."""

    source: ClassVar[str] = "codex"

    def __init__(self, *, model: str | None = None) -> None:
        super().__init__(model=model)
        self._started: set[str] = set()
        self._texts: list[str] = []
        self._pending_error = ""
        self._turns = 0
        #: the thread's totals before this turn (resumed threads report running totals)
        self.baseline: dict[str, int] = {}

    def _frame(self, frame: dict[str, Any]) -> list[Event]:
        kind = frame.get("type")
        if kind == "thread.started":
            tid = frame["thread_id"]
            if not isinstance(tid, str) or not tid:
                return [Raw(source=self.source, payload=frame)]
            if self.provider_session_id is None:
                self.provider_session_id = tid
            return [Session(session_id="", provider=self.source, model=self.model, provider_session_id=tid)]
        if kind == "turn.started":
            self._turns += 1
            return []
        if kind in ("item.started", "item.updated", "item.completed"):
            item = frame["item"]
            if not isinstance(item, dict):
                return [Raw(source=self.source, payload=frame)]
            return self._item(item, done=kind == "item.completed")
        if kind == "turn.completed":
            return self._turn_completed(frame)
        if kind == "turn.failed":
            error = frame.get("error")
            message = str(error.get("message", "")) if isinstance(error, dict) else str(error or "")
            message = message or self._pending_error or "the turn failed"
            self.terminal_seen = True
            kind_, retryable = classify_message(message)
            self.outcome, self.stop_reason = "failed", kind_
            return [self._error(kind_, f"Codex: {message}", retryable=retryable)]
        if kind == "error":
            message = str(frame["message"])
            if message.startswith("Reconnecting"):
                return [self._notice(message)]
            # Provisional: it stands only if the turn fails (or the stream ends without a verdict).
            self._pending_error = message
            return []
        return [Raw(source=self.source, payload=frame)]

    def _notice(self, message: str) -> Error:
        """A retry notice: a retryable error event with its attempt number, never a verdict."""
        match = _NOTICE.match(message)
        numbered = match is not None and match.group(1) is not None
        detail = match.group(3) if match is not None else message
        kind, retryable = classify_message(detail)
        if not retryable:
            # Codex retries it, so it is retryable; the status in the text is of a failed handshake.
            kind = "transport"
        if numbered and match is not None:
            # One of Codex's own bounded retries: it ends them itself (and may fall back to HTTP).
            return self._error(kind, f"Codex: {message}", retryable=True, attempt=int(match.group(1)))
        self.retries += 1
        self.retry_kind = kind
        return self._error(kind, f"Codex: {message}", retryable=True, attempt=self.retries)

    def _item(self, item: dict[str, Any], *, done: bool) -> list[Event]:
        item_id = str(item["id"])
        itype = item.get("type")
        if itype == "agent_message":
            if not done:
                return []
            text = str(item.get("text", ""))
            self._texts.append(text)
            return [Text(text=text)]
        if itype == "reasoning":
            return [Reasoning(text=str(item.get("text", "")))] if done else []
        if itype == "command_execution":
            return self._tool(
                item_id,
                "shell",
                {"command": item.get("command", "")},
                done=done,
                output=str(item.get("aggregated_output") or ""),
                failed=item.get("status") in ("failed", "declined") or item.get("exit_code") not in (0, None),
                source="agent",
            )
        if itype == "mcp_tool_call":
            name = f"{item.get('server', '')}.{item.get('tool', '')}"
            arguments = item.get("arguments")
            result = item.get("result")
            error = item.get("error")
            output = (
                mcp_output_text(result)
                if error is None
                else str(error.get("message", error) if isinstance(error, dict) else error)
            )
            return self._tool(
                item_id,
                name,
                arguments if isinstance(arguments, dict) else {"arguments": arguments},
                done=done,
                output=output,
                failed=item.get("status") == "failed" or error is not None,
                source="mcp",
            )
        if itype == "web_search":
            return self._tool(
                item_id,
                "web_search",
                {"query": item.get("query", "")},
                done=done,
                output="",
                failed=False,
                source="agent",
            )
        if itype == "file_change":
            changes = item.get("changes")
            if not isinstance(changes, list):
                return [Raw(source=self.source, payload=item)] if done else []
            paths = [c for c in changes if isinstance(c, dict) and isinstance(c.get("path"), str)]
            failed = item.get("status") in ("failed", "declined")
            events: list[Event] = self._tool(
                item_id,
                "apply_patch",
                {"changes": [{"path": c["path"], "kind": c.get("kind")} for c in paths]},
                done=done,
                output="",
                failed=failed,
                source="agent",
            )
            if done and not failed:
                events += [
                    FileChange(path=c["path"], kind=_CHANGE_KINDS.get(str(c.get("kind")), "edited"), call_id=item_id)
                    for c in paths
                ]
            return events
        if itype == "error":
            # A non-fatal notice inside the turn (an unknown model's metadata, for one).
            return [Raw(source=self.source, payload=item)] if done else []
        return [Raw(source=self.source, payload=item)] if done else []

    def _tool(
        self,
        item_id: str,
        name: str,
        arguments: dict[str, Any],
        *,
        done: bool,
        output: str,
        failed: bool,
        source: str,
    ) -> list[Event]:
        events: list[Event] = []
        if item_id not in self._started:
            self._started.add(item_id)
            events.append(ToolCall(call_id=item_id, name=name, arguments=arguments, source=source))
        if done:
            events.append(ToolResult(call_id=item_id, output=output, is_error=failed, name=name))
        return events

    def _turn_completed(self, frame: dict[str, Any]) -> list[Event]:
        self.terminal_seen = True
        self.outcome, self.stop_reason = "completed", "end_turn"
        self.final_text = self._texts[-1] if self._texts else ""
        usage = frame.get("usage")
        if not isinstance(usage, dict):
            return []
        usage_id = f"codex:{self.provider_session_id}:{self._turns}" if self.provider_session_id else None
        return self._usage(usage, usage_id)

    def _usage(self, usage: dict[str, Any], usage_id: str | None) -> list[Event]:
        """The turn's share of the thread's running token totals ``usage``."""

        def turn_share(key: str) -> int:
            # Floored at zero: a total below the baseline means the thread was reset, not refunded.
            return max(as_int(usage.get(key)) - self.baseline.get(key, 0), 0)

        return [
            Usage(
                # OpenAI's input count already includes the cached tokens.
                input_tokens=turn_share("input_tokens"),
                output_tokens=turn_share("output_tokens"),
                cache_read_tokens=turn_share("cached_input_tokens"),
                cache_write_tokens=turn_share("cache_write_input_tokens"),
                model=self.model,
                usage_id=usage_id,
            )
        ]

    def _missing_result(self, returncode: int | None, stderr: str) -> list[Event]:
        if self._pending_error and not self.errors:
            kind, retryable = classify_message(self._pending_error)
            return [self._error(kind, f"Codex: {self._pending_error}", retryable=retryable)]
        return super()._missing_result(returncode, stderr)


def mcp_output_text(result: Any) -> str:
    if isinstance(result, dict):
        content = result.get("content")
        if isinstance(content, list):
            return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return "" if result is None else str(result)
