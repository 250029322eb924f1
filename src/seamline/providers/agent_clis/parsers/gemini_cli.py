"""The Gemini CLI's ``--output-format stream-json``, as the program prints it.

Frames: ``init`` (``session_id``, ``model``), ``message`` (``role``, ``content``; assistant
chunks carry ``delta: true``), ``tool_use`` (``tool_name``, ``tool_id``, ``parameters``),
``tool_result`` (``tool_id``, ``status``, ``output`` or ``error``), ``error`` (``severity``,
``message``) and ``result`` (``status``; ``stats`` with the turn's tokens, per model).
Failures: ``result`` with ``status: "error"`` and an ``error`` whose message embeds the HTTP
status; the exit code is that status modulo 256, so it is not read as a verdict here. A
stream cut mid-way exits 0 with an ``error`` line and no failing ``result``, or prints a
``result`` with ``status: "error"`` and no ``error`` object after that line: the turn's
classification is then the first real cause. The CLI's retries show only on stderr
(``Attempt N failed. Retrying with backoff... Error: ...``): :meth:`watch_stderr` counts them.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Final

from seamline.events import (
    Event,
    FileChange,
    FileChangeKind,
    Raw,
    Session,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from seamline.providers.agent_clis.parsers.base import StreamParser, as_int, classify_message

__all__ = ["GeminiStreamJsonParser"]

# A retry notice; the last attempt's failure ("Attempt N failed: ...") retries nothing.
_ATTEMPT: Final = re.compile(r"^Attempt (\d+) failed\. Retrying[^\n]*?(?:Error: ([^\n]*))?$", re.MULTILINE)
_FILE_TOOLS: Final[dict[str, FileChangeKind]] = {
    "read_file": "read",
    "write_file": "edited",
    "replace": "edited",
    "edit": "edited",
}


class GeminiStreamJsonParser(StreamParser):
    """Parser for ``gemini -p PROMPT -o stream-json``."""

    source: ClassVar[str] = "gemini-cli"

    def __init__(self, *, model: str | None = None) -> None:
        super().__init__(model=model)
        self._calls: dict[str, tuple[str, dict[str, Any]]] = {}
        self._chunks: list[str] = []
        self._texts: list[str] = []

    def _frame(self, frame: dict[str, Any]) -> list[Event]:
        kind = frame.get("type")
        if kind == "init":
            sid = frame["session_id"]
            if not isinstance(sid, str) or not sid:
                return [Raw(source=self.source, payload=frame)]
            model = frame.get("model")
            if isinstance(model, str) and model:
                self.model = model
            if self.provider_session_id is None:
                self.provider_session_id = sid
            return [Session(session_id="", provider=self.source, model=self.model, provider_session_id=sid)]
        if kind == "message":
            return self._message(frame)
        if kind == "tool_use":
            return self._end_text() + self._tool_use(frame)
        if kind == "tool_result":
            return self._tool_result(frame)
        if kind == "error":
            message = str(frame["message"])
            if frame.get("severity") == "warning":
                return [Raw(source=self.source, payload=frame)]
            kind_, retryable = classify_message(message)
            return [self._error(kind_, f"Gemini CLI: {message}", retryable=retryable)]
        if kind == "result":
            return self._end_text() + self._result(frame)
        return [Raw(source=self.source, payload=frame)]

    def _message(self, frame: dict[str, Any]) -> list[Event]:
        if frame.get("role") != "assistant":
            return []  # the prompt, echoed
        content = frame["content"]
        if not isinstance(content, str):
            return [Raw(source=self.source, payload=frame)]
        if frame.get("delta"):
            self._chunks.append(content)
            return [TextDelta(text=content)]
        self._texts.append(content)
        return [Text(text=content)]

    def _end_text(self) -> list[Event]:
        if not self._chunks:
            return []
        text = "".join(self._chunks)
        self._chunks = []
        self._texts.append(text)
        return [Text(text=text)]

    def _tool_use(self, frame: dict[str, Any]) -> list[Event]:
        call_id = str(frame["tool_id"])
        name = str(frame["tool_name"])
        arguments = frame.get("parameters")
        arguments = arguments if isinstance(arguments, dict) else {"parameters": arguments}
        self._calls[call_id] = (name, arguments)
        # MCP tools reach the model as mcp_<server>_<tool>; the CLI's own tools never start so.
        source = "mcp" if name.startswith("mcp_") else "agent"
        return [ToolCall(call_id=call_id, name=name, arguments=arguments, source=source)]

    def _tool_result(self, frame: dict[str, Any]) -> list[Event]:
        call_id = str(frame["tool_id"])
        failed = frame.get("status") != "success"
        error = frame.get("error")
        raw_output = frame.get("output")
        if failed and isinstance(error, dict):
            output = str(error.get("message", ""))
        else:
            output = raw_output if isinstance(raw_output, str) else ("" if raw_output is None else str(raw_output))
        name, arguments = self._calls.get(call_id, ("", {}))
        events: list[Event] = [ToolResult(call_id=call_id, output=output, is_error=failed, name=name or None)]
        kind = _FILE_TOOLS.get(name)
        path = arguments.get("file_path") or arguments.get("absolute_path")
        if kind is not None and not failed and isinstance(path, str) and path:
            events.append(FileChange(path=path, kind=kind, call_id=call_id))
        return events

    def _result(self, frame: dict[str, Any]) -> list[Event]:
        self.terminal_seen = True
        events: list[Event] = []
        stats = frame.get("stats")
        if isinstance(stats, dict):
            events += self._usage(stats)
        if frame.get("status") == "success":
            if self.errors:
                # An error line came first (a cut stream exits 0 and still says success).
                self.outcome, self.stop_reason = "failed", self.errors[0].kind
            else:
                self.outcome, self.stop_reason = "completed", "end_turn"
            self.final_text = self._texts[-1] if self._texts else ""
            return events
        error = frame.get("error")
        self.outcome = "failed"
        if not error and self.errors:
            # The error line before it said what went wrong; this result only closes the turn.
            self.stop_reason = self.errors[0].kind
            return events
        message = str(error.get("message", "")) if isinstance(error, dict) else str(error or "the turn failed")
        kind, retryable = classify_message(message)
        events.append(self._error(kind, f"Gemini CLI: {message}", retryable=retryable))
        self.stop_reason = self.errors[0].kind
        return events

    def watch_stderr(self, tail: str) -> list[Event]:
        """Count the retries the CLI reports on stderr only (``Attempt N failed...``)."""
        events: list[Event] = []
        for match in _ATTEMPT.finditer(tail):
            attempt = int(match.group(1))
            if attempt <= self.retries:
                continue
            self.retries = attempt
            detail = (match.group(2) or match.group(0)).strip()
            kind, retryable = classify_message(detail)
            self.retry_kind = kind if retryable else "transport"
            events.append(
                self._error(
                    self.retry_kind, f"Gemini CLI: {detail[:300]}; the CLI retries", retryable=True, attempt=attempt
                )
            )
        return events

    def _usage(self, stats: dict[str, Any]) -> list[Event]:
        models = stats.get("models")
        per_model = models if isinstance(models, dict) and models else {self.model or "": stats}
        events: list[Event] = []
        for model, figures in per_model.items():
            if not isinstance(figures, dict):
                continue
            events.append(
                Usage(
                    # ``input_tokens`` counts every input token; ``cached`` is the cached part.
                    input_tokens=as_int(figures.get("input_tokens")),
                    output_tokens=as_int(figures.get("output_tokens")),
                    cache_read_tokens=as_int(figures.get("cached")),
                    model=str(model) or self.model,
                    usage_id=f"gemini-cli:{self.provider_session_id}:{model}:{self.lines}",
                )
            )
        return events
