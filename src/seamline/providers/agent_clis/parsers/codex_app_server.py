"""Codex's ``codex app-server`` (JSON-RPC 2.0 over stdio), one turn of a warm thread.

The server answers seamline's requests (``{"id", "result"}`` or ``{"id", "error"}``) and
sends notifications ``{"method", "params"}``: ``thread/started``, ``turn/started``,
``item/started`` / ``item/completed`` (items in camelCase: ``agentMessage``, ``reasoning``,
``commandExecution``, ``fileChange``, ``mcpToolCall``, ``webSearch``, ``userMessage``…),
``item/agentMessage/delta`` (text deltas, which ``codex exec --json`` never prints),
``thread/tokenUsage/updated`` (the thread's running ``total`` and the ``last`` model call),
``error`` (``willRetry``: a retry notice, else the cause of a failing turn), ``warning``, and
``turn/completed`` with the turn's ``status`` (completed, interrupted, failed) and ``error``.
The events are those :class:`CodexJsonParser` gives for the same turn, plus text deltas.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from seamline.events import ErrorKind, Event, FileChange, FileChangeKind, Raw, Reasoning, Session, Text, TextDelta
from seamline.providers.agent_clis.parsers.base import classify_message
from seamline.providers.agent_clis.parsers.codex import CodexJsonParser, mcp_output_text

__all__ = ["TURN_REQUEST_PREFIX", "CodexAppServerParser", "rpc_error"]

#: the JSON-RPC id prefix of seamline's ``turn/start`` requests (an error answer ends the turn)
TURN_REQUEST_PREFIX: Final = "turn-"
_CHANGE_KINDS: Final[dict[str, FileChangeKind]] = {"add": "created", "delete": "deleted", "update": "edited"}
# The app-server's token names, as the exec stream and the rollout spell them.
_TOKEN_KEYS: Final = {
    "inputTokens": "input_tokens",
    "cachedInputTokens": "cached_input_tokens",
    "cacheWriteInputTokens": "cache_write_input_tokens",
    "outputTokens": "output_tokens",
    "reasoningOutputTokens": "reasoning_output_tokens",
    "totalTokens": "total_tokens",
}
# Codex's own failure classes; anything else is classified from the message.
_ERROR_INFO: Final[dict[str, tuple[ErrorKind, bool]]] = {
    "unauthorized": ("auth", False),
    "usageLimitExceeded": ("quota", True),
    "rateLimitExceeded": ("quota", True),
    "serverOverloaded": ("provider", True),
    "internalServerError": ("provider", True),
    "badRequest": ("invalid_request", False),
    "modelNotFound": ("invalid_request", False),
    "contextWindowExceeded": ("invalid_request", False),
    "sandboxError": ("sandbox", False),
}
# Notifications that say nothing about the turn's work.
_QUIET: Final = frozenset(
    {
        "thread/status/changed",
        "account/rateLimits/updated",
        "remoteControl/status/changed",
        "mcpServer/startupStatus/updated",
        "item/reasoning/summaryTextDelta",
        "item/reasoning/summaryPartAdded",
        "item/reasoning/textDelta",
        "item/commandExecution/outputDelta",
        "item/fileChange/outputDelta",
        "turn/diff/updated",
        "hook/started",
        "hook/completed",
        "serverRequest/resolved",
        "thread/settings/updated",
    }
)


class CodexAppServerParser(CodexJsonParser):
    """Parser for one turn of ``codex app-server`` on a thread kept between turns.

    The handshake's lines (the thread's ``thread/start`` or ``thread/resume`` answer) are
    read by the first turn. What the next turn on the same process needs (the thread id,
    the running token totals) is in :meth:`carry_over`.
    """

    source: ClassVar[str] = "codex"

    def __init__(self, *, model: str | None = None) -> None:
        super().__init__(model=model)
        self._carried: dict[str, Any] = {}
        self._totals: dict[str, int] | None = None
        self._turn_id = ""
        self._said_session = False

    def continue_from(self, carried: dict[str, Any]) -> None:
        self._carried = carried
        thread = carried.get("thread_id")
        if isinstance(thread, str) and thread:
            self.provider_session_id = thread
        totals = carried.get("totals")
        if isinstance(totals, dict):
            self.baseline = dict(totals)

    def carry_over(self) -> dict[str, Any]:
        carried: dict[str, Any] = {"totals": dict(self._totals if self._totals is not None else self.baseline)}
        thread = self._carried.get("thread_id") or self.provider_session_id
        if thread:
            carried["thread_id"] = thread
        return carried

    def _frame(self, frame: dict[str, Any]) -> list[Event]:
        method = frame.get("method")
        if method is None:
            return self._answer(frame)
        if method in _QUIET:
            return []
        params = frame["params"]
        if method == "item/agentMessage/delta":
            return [TextDelta(text=str(params["delta"]))]
        if method in ("item/started", "item/completed"):
            item = params["item"]
            return self._app_item(item, done=method == "item/completed") if isinstance(item, dict) else []
        if method == "thread/tokenUsage/updated":
            total = params["tokenUsage"]["total"]
            self._totals = {_TOKEN_KEYS[k]: v for k, v in total.items() if k in _TOKEN_KEYS and isinstance(v, int)}
            return []
        if method == "turn/started":
            self._set_turn(params["turn"]["id"])
            return []
        if method == "thread/started":
            return self._thread(params["thread"])
        if method == "turn/completed":
            return self._completed(params["turn"])
        if method == "error":
            error = params["error"]
            message = str(error.get("message", "")) if isinstance(error, dict) else str(error)
            if params.get("willRetry"):
                return [self._notice(f"Reconnecting... {message}")]
            self._pending_error = message  # the turn's verdict comes with turn/completed
            return []
        return [Raw(source=self.source, payload=frame)]

    def _answer(self, frame: dict[str, Any]) -> list[Event]:
        """An answer to one of seamline's requests."""
        result = frame.get("result")
        if isinstance(result, dict):
            if isinstance(result.get("thread"), dict):
                return self._thread(result["thread"])
            if isinstance(result.get("turn"), dict):
                self._set_turn(result["turn"]["id"])
            return []
        error = frame.get("error")
        if error is not None and str(frame.get("id", "")).startswith(TURN_REQUEST_PREFIX):
            # Codex refused the turn itself: no turn/completed will follow.
            kind, retryable, message = rpc_error(error)
            self.terminal_seen = True
            self.outcome, self.stop_reason = "failed", kind
            return [self._error(kind, f"Codex: {message}", retryable=retryable)]
        return [Raw(source=self.source, payload=frame)]

    def _thread(self, thread: dict[str, Any]) -> list[Event]:
        tid = thread["id"]
        if not isinstance(tid, str) or not tid or self._said_session:
            return []
        self._said_session = True
        self.provider_session_id = tid
        return [Session(session_id="", provider=self.source, model=self.model, provider_session_id=tid)]

    def _set_turn(self, turn_id: Any) -> None:
        if isinstance(turn_id, str) and turn_id:
            self._turn_id = turn_id

    def _app_item(self, item: dict[str, Any], *, done: bool) -> list[Event]:
        item_id = str(item["id"])
        itype = item.get("type")
        if itype == "agentMessage":
            if not done:
                return []
            text = str(item.get("text", ""))
            self._texts.append(text)
            return [Text(text=text)]
        if itype == "reasoning":
            if not done:
                return []
            parts = item.get("summary") or item.get("content") or []
            text = "\n".join(str(p) for p in parts) if isinstance(parts, list) else str(parts)
            return [Reasoning(text=text)] if text else []
        if itype == "commandExecution":
            return self._tool(
                item_id,
                "shell",
                {"command": item.get("command", "")},
                done=done,
                output=str(item.get("aggregatedOutput") or ""),
                failed=item.get("status") in ("failed", "declined") or item.get("exitCode") not in (0, None),
                source="agent",
            )
        if itype == "mcpToolCall":
            arguments = item.get("arguments")
            error = item.get("error")
            output = (
                mcp_output_text(item.get("result"))
                if error is None
                else str(error.get("message", error) if isinstance(error, dict) else error)
            )
            return self._tool(
                item_id,
                f"{item.get('server', '')}.{item.get('tool', '')}",
                arguments if isinstance(arguments, dict) else {"arguments": arguments},
                done=done,
                output=output,
                failed=item.get("status") == "failed" or error is not None,
                source="mcp",
            )
        if itype == "webSearch":
            query = {"query": item.get("query", "")}
            return self._tool(item_id, "web_search", query, done=done, output="", failed=False, source="agent")
        if itype == "fileChange":
            return self._file_change(item_id, item, done=done)
        if itype == "userMessage":
            return []  # the prompt seamline sent
        return [Raw(source=self.source, payload=item)] if done else []

    def _file_change(self, item_id: str, item: dict[str, Any], *, done: bool) -> list[Event]:
        changes = item.get("changes")
        if not isinstance(changes, list):
            return [Raw(source=self.source, payload=item)] if done else []
        found = [(c["path"], _kind_of(c.get("kind"))) for c in changes if isinstance(c, dict) and "path" in c]
        failed = item.get("status") in ("failed", "declined")
        arguments = {"changes": [{"path": path, "kind": kind} for path, kind in found]}
        events: list[Event] = self._tool(
            item_id, "apply_patch", arguments, done=done, output="", failed=failed, source="agent"
        )
        if done and not failed:
            events += [
                FileChange(path=str(path), kind=_CHANGE_KINDS.get(kind, "edited"), call_id=item_id)
                for path, kind in found
            ]
        return events

    def _completed(self, turn: dict[str, Any]) -> list[Event]:
        status = turn.get("status")
        self._set_turn(turn.get("id"))
        events: list[Event] = []
        if status == "failed":
            error = turn.get("error")
            message = str(error.get("message", "")) if isinstance(error, dict) else ""
            message = message or self._pending_error or "the turn failed"
            info = error.get("codexErrorInfo") if isinstance(error, dict) else None
            known = isinstance(info, str) and info in _ERROR_INFO
            kind, retryable = _ERROR_INFO[str(info)] if known else classify_message(message)
            self.terminal_seen = True
            self.outcome, self.stop_reason = "failed", kind
            events.append(self._error(kind, f"Codex: {message}", retryable=retryable))
        elif status == "interrupted":
            self.terminal_seen = True
            self.outcome, self.stop_reason = "aborted", "aborted"
        else:
            self.terminal_seen = True
            self.outcome, self.stop_reason = "completed", "end_turn"
            self.final_text = self._texts[-1] if self._texts else ""
        if self._totals is None:
            return events
        usage_id = f"codex:{self.provider_session_id}:{self._turn_id}" if self.provider_session_id else None
        return [*events, *self._usage(self._totals, usage_id)]


def rpc_error(error: Any) -> tuple[ErrorKind, bool, str]:
    """The kind, retryability and message of a JSON-RPC error answer: a request the server
    refused as invalid (-32600, -32602) is ``invalid_request``; others by their message."""
    message = str(error.get("message", error) if isinstance(error, dict) else error)
    if isinstance(error, dict) and error.get("code") in (-32600, -32602):
        return "invalid_request", False, message
    kind, retryable = classify_message(message)
    return kind, retryable, message


def _kind_of(kind: Any) -> str:
    if isinstance(kind, dict):
        return str(kind.get("type", "update"))
    return str(kind or "update")
