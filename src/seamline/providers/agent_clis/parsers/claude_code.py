"""Claude Code's ``--output-format stream-json --verbose`` (with or without
``--include-partial-messages``), as the program prints it.

Frames: ``system`` (``init`` carries the session id and model; ``api_retry`` counts an API
retry), ``stream_event`` (Anthropic SSE events: text and thinking deltas), ``assistant``
(one line per content block; text, thinking or tool_use), ``user`` (tool results, with the
program's own ``tool_use_result`` detail), ``result`` (the turn's end, with usage and
``total_cost_usd``). An API failure looks like success at first glance: ``result`` has
``subtype: "success"`` but ``is_error: true`` and ``api_error_status``, after a synthetic
``assistant`` message (model ``<synthetic>``) whose text starts ``API Error:``.

A process that takes several turns (``--input-format stream-json``) reports ``modelUsage``
and ``total_cost_usd`` as running totals of the process; a parser that continues from the
previous turn's (:meth:`~ClaudeStreamJsonParser.continue_from`) reports the turn's own.
``control_response`` lines (answers to our interrupt) report nothing.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from seamline.events import (
    Event,
    FileChange,
    FileChangeKind,
    PermissionDecision,
    Raw,
    Reasoning,
    ReasoningDelta,
    Session,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from seamline.providers.agent_clis.parsers.base import (
    StreamParser,
    as_int,
    classify_http_status,
    classify_message,
    text_of,
)

__all__ = ["ClaudeStreamJsonParser"]

# Tools whose successful result means a file was read or changed, and the argument naming it.
_FILE_TOOLS: Final[dict[str, tuple[str, FileChangeKind]]] = {
    "Read": ("file_path", "read"),
    "Edit": ("file_path", "edited"),
    "MultiEdit": ("file_path", "edited"),
    "Write": ("file_path", "edited"),
    "NotebookEdit": ("notebook_path", "edited"),
}


class ClaudeStreamJsonParser(StreamParser):
    """Parser for ``claude -p --output-format stream-json --verbose``."""

    source: ClassVar[str] = "claude-code"

    def __init__(self, *, model: str | None = None) -> None:
        super().__init__(model=model)
        self._calls: dict[str, tuple[str, dict[str, Any]]] = {}
        self._streamed_blocks: set[tuple[str, int]] = set()
        self._message_id = ""
        self._api_error_text = ""
        # The process's running totals before this turn, and after it (see continue_from).
        self._before: dict[str, Any] = {}
        self._running: dict[str, Any] = {}

    def continue_from(self, carried: dict[str, Any]) -> None:
        before = carried.get("running")
        self._before = dict(before) if isinstance(before, dict) else {}
        self._running = dict(self._before)

    def carry_over(self) -> dict[str, Any]:
        return {"running": dict(self._running)}

    def _frame(self, frame: dict[str, Any]) -> list[Event]:
        kind = frame.get("type")
        if kind == "stream_event":
            return self._stream_event(frame.get("event"))
        if kind == "assistant":
            return self._assistant(frame)
        if kind == "user":
            return self._user(frame)
        if kind == "system":
            return self._system(frame)
        if kind == "result":
            return self._result(frame)
        if kind == "control_response":
            return []  # the answer to a control request (our interrupt): kept in the raw log
        return [Raw(source=self.source, payload=frame)]

    def _system(self, frame: dict[str, Any]) -> list[Event]:
        subtype = frame.get("subtype")
        if subtype == "init":
            sid = frame["session_id"]
            if not isinstance(sid, str) or not sid:
                return [Raw(source=self.source, payload=frame)]
            model = frame.get("model") if isinstance(frame.get("model"), str) else self.model
            self.model = model
            if self.provider_session_id is None:
                self.provider_session_id = sid
            return [Session(session_id="", provider=self.source, model=model, provider_session_id=sid)]
        if subtype == "api_retry":
            self.retries += 1
            status = frame.get("error_status")
            kind, _ = classify_http_status(status if isinstance(status, int) else None)
            self.retry_kind = kind
            attempt = frame.get("attempt")
            detail = frame.get("error") or "error"
            return [
                self._error(
                    kind,
                    f"API {status if status is not None else 'unreachable'}: {detail}; the CLI retries",
                    retryable=True,
                    attempt=attempt if isinstance(attempt, int) else self.retries,
                )
            ]
        # status, hook and compaction notices: kept in the raw log, nothing to report.
        return []

    def _stream_event(self, event: Any) -> list[Event]:
        if not isinstance(event, dict):
            return [Raw(source=self.source, payload={"stream_event": event})]
        etype = event.get("type")
        if etype == "message_start":
            message = event.get("message") or {}
            self._message_id = str(message.get("id", ""))
            return []
        if etype == "content_block_delta":
            delta = event["delta"]
            index = event.get("index", 0)
            if delta.get("type") == "text_delta":
                self._streamed_blocks.add((self._message_id, index))
                return [TextDelta(text=str(delta["text"]))]
            if delta.get("type") == "thinking_delta":
                self._streamed_blocks.add((self._message_id, index))
                return [ReasoningDelta(text=str(delta["thinking"]))]
        return []

    def _assistant(self, frame: dict[str, Any]) -> list[Event]:
        message = frame["message"]
        content = message["content"]
        if not isinstance(content, list):
            return [Raw(source=self.source, payload=frame)]
        if message.get("model") == "<synthetic>":
            # Claude Code reports an API failure as a made-up assistant message; the result
            # frame that follows carries the status. Keep the text for the error message.
            self._api_error_text = text_of(content)
            return [Raw(source=self.source, payload=frame)]
        events: list[Event] = []
        for block in content:
            if not isinstance(block, dict):
                events.append(Raw(source=self.source, payload={"block": block}))
                continue
            btype = block.get("type")
            if btype == "text":
                events.append(Text(text=str(block["text"])))
            elif btype == "thinking":
                events.append(Reasoning(text=str(block.get("thinking", ""))))
            elif btype == "redacted_thinking":
                continue
            elif btype in ("tool_use", "server_tool_use"):
                call_id = str(block["id"])
                name = str(block["name"])
                arguments = block.get("input")
                arguments = arguments if isinstance(arguments, dict) else {"input": arguments}
                self._calls[call_id] = (name, arguments)
                source = "mcp" if name.startswith("mcp__") else "agent"
                events.append(ToolCall(call_id=call_id, name=name, arguments=arguments, source=source))
            else:
                events.append(Raw(source=self.source, payload={"block": block}))
        return events

    def _user(self, frame: dict[str, Any]) -> list[Event]:
        content = frame["message"]["content"]
        if isinstance(content, str):
            return []  # a prompt echo or the interrupt marker
        events: list[Event] = []
        detail = frame.get("tool_use_result")
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            call_id = str(block["tool_use_id"])
            is_error = bool(block.get("is_error", False))
            name, arguments = self._calls.get(call_id, ("", {}))
            events.append(
                ToolResult(call_id=call_id, output=text_of(block.get("content")), is_error=is_error, name=name or None)
            )
            change = _file_change(name, arguments, detail, call_id) if not is_error else None
            if change is not None:
                events.append(change)
        return events

    def _result(self, frame: dict[str, Any]) -> list[Event]:
        self.terminal_seen = True
        events: list[Event] = []
        sid = frame.get("session_id")
        if isinstance(sid, str) and sid and self.provider_session_id is None:
            self.provider_session_id = sid
            events.append(Session(session_id="", provider=self.source, model=self.model, provider_session_id=sid))
        events.extend(self._turn_usage(frame))
        events.extend(_denials(frame.get("permission_denials")))
        subtype = frame.get("subtype")
        result_text = frame.get("result") if isinstance(frame.get("result"), str) else ""
        stop = frame.get("stop_reason")
        if frame.get("is_error") and subtype == "success":
            status = frame.get("api_error_status")
            message = result_text or self._api_error_text or "the API call failed"
            if isinstance(status, int):
                kind, retryable = classify_http_status(status)
                if status == 529:
                    kind, retryable = "provider", True
            else:
                kind, retryable = classify_message(message)
                if kind == "provider" and status is None and "API Error" in message:
                    kind, retryable = "transport", True
            events.append(self._error(kind, message, retryable=retryable))
            self.outcome, self.stop_reason = "failed", kind
            return events
        if subtype == "success":
            self.outcome = "completed"
            self.stop_reason = stop if isinstance(stop, str) and stop else "end_turn"
            self.final_text = str(result_text)
            return events
        if subtype == "error_max_budget_usd":
            self.outcome, self.stop_reason = "budget", "max_budget_usd"
            events.append(self._error("budget", "Claude Code stopped at its --max-budget-usd"))
            return events
        if subtype == "error_max_turns":
            self.outcome, self.stop_reason = "failed", "max_turns"
            events.append(self._error("provider", f"Claude Code stopped after {frame.get('num_turns')} turns"))
            return events
        terminal = frame.get("terminal_reason")
        interrupted = isinstance(terminal, str) and terminal.startswith("aborted")
        if subtype == "error_during_execution" and (self.aborting or interrupted):
            # What Claude Code prints after SIGINT (ours, or anyone's: terminal_reason says
            # "aborted_streaming"): an interrupted turn, not a failure.
            self.outcome, self.stop_reason = "aborted", "aborted"
            return events
        errors = frame.get("errors")
        detail = "; ".join(str(e) for e in errors) if isinstance(errors, list) and errors else str(subtype)
        kind, retryable = classify_message(detail)
        if "No conversation found" in detail:
            kind, retryable = "invalid_request", False
            self.process_ends = True
        events.append(self._error(kind, f"Claude Code: {detail}", retryable=retryable))
        # The stop reason is the classified cause, as for every other failure, not the subtype.
        self.outcome, self.stop_reason = "failed", kind
        return events

    def _turn_usage(self, frame: dict[str, Any]) -> list[Usage]:
        """The turn's usage: the frame's figures less the process's totals before the turn."""
        per_model = frame.get("modelUsage")
        running: dict[str, Any] = {}
        if isinstance(per_model, dict):
            running.update(
                {f"model:{name}": figures for name, figures in per_model.items() if isinstance(figures, dict)}
            )
        total = _number(frame.get("total_cost_usd"))
        if total is not None:
            running["total_cost_usd"] = total
        events = _usage(frame, self.model, self._before)
        self._running = {**self._before, **running}
        return events


def _denials(denials: Any) -> list[Event]:
    """The tool calls Claude Code refused to run (no allow rule): decisions by the agent."""
    if not isinstance(denials, list):
        return []
    events: list[Event] = []
    for denial in denials:
        if not isinstance(denial, dict) or not isinstance(denial.get("tool_use_id"), str):
            continue
        name = str(denial.get("tool_name") or "tool")
        events.append(
            PermissionDecision(
                request_id=f"perm-{denial['tool_use_id']}",
                decision="deny",
                reason=f"denied by Claude Code: no permission rule allows {name}",
            )
        )
    return events


def _file_change(name: str, arguments: dict[str, Any], detail: Any, call_id: str) -> FileChange | None:
    spec = _FILE_TOOLS.get(name)
    if spec is None:
        return None
    key, kind = spec
    path = arguments.get(key)
    if not isinstance(path, str) or not path:
        return None
    if name == "Write" and isinstance(detail, dict) and detail.get("type") == "create":
        kind = "created"
    return FileChange(path=path, kind=kind, call_id=call_id)


def _usage(frame: dict[str, Any], model: str | None, before: dict[str, Any]) -> list[Usage]:
    """The turn's usage: per model from ``modelUsage`` (each with its ``costUSD``), else the
    summed ``usage`` with ``total_cost_usd``. ``usage`` reads zero on some error results
    (a budget stop) while ``modelUsage`` keeps the real figures, so it comes first. The
    running totals in ``before`` (earlier turns of the same process) are taken off."""
    uid = frame.get("uuid")
    base_id = f"claude-code:{uid}" if isinstance(uid, str) else None
    per_model = frame.get("modelUsage")
    if isinstance(per_model, dict) and per_model and all(isinstance(v, dict) for v in per_model.values()):
        events: list[Usage] = []
        for name, now in per_model.items():
            earlier = before.get(f"model:{name}")
            figures = _less(now, earlier if isinstance(earlier, dict) else {})
            cache_read = as_int(figures.get("cacheReadInputTokens"))
            cache_write = as_int(figures.get("cacheCreationInputTokens"))
            cost = _number(figures.get("costUSD"))
            events.append(
                Usage(
                    input_tokens=as_int(figures.get("inputTokens")) + cache_read + cache_write,
                    output_tokens=as_int(figures.get("outputTokens")),
                    cache_read_tokens=cache_read,
                    cache_write_tokens=cache_write,
                    cost_usd=cost,
                    priced=cost is not None,
                    model=str(name),
                    usage_id=f"{base_id}:{name}" if base_id else None,
                )
            )
        return events
    usage = frame.get("usage")
    if not isinstance(usage, dict):
        return []
    cache_read = as_int(usage.get("cache_read_input_tokens"))
    cache_write = as_int(usage.get("cache_creation_input_tokens"))
    cost = _number(frame.get("total_cost_usd"))
    earlier_cost = _number(before.get("total_cost_usd"))
    if cost is not None and earlier_cost is not None:
        cost = max(cost - earlier_cost, 0.0)  # ``usage`` is the turn's own; the cost is not
    return [
        Usage(
            # Anthropic counts input without the cached part; seamline's input includes it.
            input_tokens=as_int(usage.get("input_tokens")) + cache_read + cache_write,
            output_tokens=as_int(usage.get("output_tokens")),
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            cost_usd=cost,
            priced=cost is not None,
            model=model,
            usage_id=base_id,
        )
    ]


def _less(now: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """Running figures less the earlier ones (never below zero); the rest as they are."""
    if not earlier:
        return now
    out = dict(now)
    for key, value in now.items():
        was = _number(earlier.get(key))
        if was is not None and (current := _number(value)) is not None:
            exact = key == "costUSD" or isinstance(value, float)
            out[key] = max(current - was, 0.0) if exact else max(int(current - was), 0)
    return out


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
