"""GenAI spans rebuilt from trace records, deterministically.

:class:`SpanBuilder` reads records one at a time (decoded trace records, typed; or a plain
turn's, given as ``seq``, ``kind``, ``at``, ``d``, ``o``) and hands back each span as it
ends. It never imports OpenTelemetry: ids are derived from the run id and the record's
``seq`` (a hash), times come from the records' ``at``, so the spans of a run are the same
whether they are built while it runs or afterwards from its trace.

The shape follows the OpenTelemetry GenAI semantic conventions:

- a pipeline run is ``invoke_workflow {pipeline}`` (``gen_ai.workflow.name``), the root;
- each turn is ``invoke_agent {gen_ai.agent.name}``: the role's name in a pipeline, the
  provider's for a plain ``seamline run``; CLIENT for out-of-process agents, INTERNAL for
  seamline's loop. The roles of a parallel phase run at once: their records interleave, so
  every open turn is kept by its (phase, role, round, attempt), and its tool calls by
  that turn and their call id;
- each model call (one ``usage`` event, or one ``error``: a failed call) is ``chat {model}``;
- each tool call is ``execute_tool {tool}``, from its ``tool_call`` to its ``tool_result``.

Every span has ``gen_ai.provider.name`` (``seamline`` for the workflow and for roles that
seamline decides itself, such as the citation reviewer).

Each span also carries OpenInference's ``openinference.span.kind`` (CHAIN for the pipeline,
AGENT for a turn, LLM for a model call, TOOL for a tool call), so Phoenix shows the kinds.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias, assert_never
from urllib.parse import urlsplit

import msgspec

from seamline.trace.schema import (
    DecisionRecord,
    EventRecord,
    GuardRecord,
    HeaderRecord,
    PhaseEndRecord,
    PhaseStartRecord,
    PromptRecord,
    RetryRecord,
    RoleEndRecord,
    RoleScopedData,
    RoleStartRecord,
    RunEndRecord,
    RunStartRecord,
    SkipRecord,
    TraceRecord,
    TransitionRecord,
)

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "AttributeValue",
    "SpanBuilder",
    "SpanRecord",
    "capture_content_from_env",
    "span_id_of",
    "trace_id_of",
]

AttributeValue: TypeAlias = str | int | float | bool | tuple[str, ...]
SpanKind: TypeAlias = Literal["internal", "client"]

CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# OpenInference's span kinds (what Phoenix and Arize group and draw spans by), beside
# the GenAI operation each span already names.
_OPENINFERENCE_KINDS: Final = {
    "invoke_workflow": "CHAIN",
    "invoke_agent": "AGENT",
    "chat": "LLM",
    "execute_tool": "TOOL",
}
# Agents that run in their own process (they run their own tools): their turn is a CLIENT call.
_OUT_OF_PROCESS: Final = frozenset({"claude-code", "codex", "gemini-cli", "acp", "opencode", "a2a"})
# Providers whose "model" runs inside seamline: their model calls are INTERNAL.
_EMBEDDED: Final = frozenset({"offline", "scripted"})
# Providers whose usage id is the vendor's response id (``gen_ai.response.id``).
_RESPONSE_IDS: Final = frozenset({"openai", "anthropic"})
# What seamline runs itself: the workflow, and roles decided without a model.
_SELF: Final = "seamline"
# A turn's stop reason as an OpenTelemetry GenAI finish reason.
_FINISH_REASONS: Final = {
    "end_turn": "stop",
    "stop": "stop",
    "completed": "stop",
    "max_tokens": "length",
    "length": "length",
    "content_filter": "content_filter",
    "refusal": "content_filter",
    "tool_use": "tool_call",
    "error": "error",
}

TurnKey: TypeAlias = tuple[Any, ...] | None


def capture_content_from_env() -> bool:
    """Whether ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for message content."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("true", "1", "yes", "on")


def trace_id_of(run_id: str) -> int:
    """The 128-bit trace id of a run (never zero)."""
    return int.from_bytes(hashlib.sha256(f"seamline-trace:{run_id}".encode()).digest()[:16], "big") or 1


def span_id_of(run_id: str, seq: int) -> int:
    """The 64-bit span id of the span opened by record ``seq`` of a run (never zero)."""
    return int.from_bytes(hashlib.sha256(f"seamline-span:{run_id}:{seq}".encode()).digest()[:8], "big") or 1


@dataclass(slots=True)
class SpanRecord:
    """One finished span, free of any OpenTelemetry type."""

    name: str
    kind: SpanKind
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    error: bool = False


@dataclass(slots=True)
class _Open:
    seq: int
    start: float
    parent: _Open | None
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    error_type: str | None = None
    # For turns: what the closing needs.
    provider: str | None = None
    model: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    cost: float | None = None
    priced: bool | None = None
    chat_start: float = 0.0
    text: str = ""
    prompt: str | None = None
    calls_since_chat: int = 0
    server: tuple[str, int | None] | None = None


def _ns(at: float) -> int:
    return round(at * 1_000_000) * 1000  # the trace keeps microseconds


class SpanBuilder:
    """Turns trace records into finished :class:`SpanRecord` objects.

    >>> b = SpanBuilder(run_id="r1")
    >>> b.add(0, "event", 1.0, {"event": {"type": "session", "provider": "offline", "model": "m"}}, {"session_id": "s"})
    []
    >>> [s.name for s in b.add(1, "event", 2.0, {"event": {"type": "complete", "outcome": "completed"}}, {})]
    ['invoke_agent offline']
    """

    def __init__(self, *, run_id: str | None = None, capture_content: bool = False) -> None:
        self.run_id = run_id
        self.capture_content = capture_content
        self._root: _Open | None = None
        self._turns: dict[TurnKey, _Open] = {}  # open turns by (phase, role, round, attempt); None: a plain run
        self._tools: dict[tuple[TurnKey, str], tuple[_Open, str]] = {}
        self._plain_prompt: str | None = None  # a plain run's prompt, recorded before its turn opens
        self._last_at = 0.0

    # -- records in, spans out ---------------------------------------------------------

    def add_record(self, record: TraceRecord) -> list[SpanRecord]:
        """Read one decoded trace record; returns the spans it ended (children before parents)."""
        self._last_at = max(self._last_at, record.at)
        seq, at = record.seq, record.at
        match record:
            case HeaderRecord(o=o):
                self._name_run(o.run_id if isinstance(o.run_id, str) else None)
            case RunStartRecord(d=d, o=o):
                self._name_run(o.run_id if isinstance(o.run_id, str) else None)
                self._open_root(seq, at, d.pipeline or "pipeline")
            case RoleStartRecord(d=d):
                where: dict[str, AttributeValue] = {"phase": d.phase, "round": d.round, "attempt": d.attempt}
                return self._role_start(_key_of(d), seq, at, d.role, where)
            case PromptRecord(d=d):
                self._prompt(_key_of(d), d.prompt, d.provider)
            case RoleEndRecord(d=d):
                failure = d.failure.kind if d.failure else None
                return self._role_end(_key_of(d), at, msgspec.to_builtins(d.usage), failure, d.status)
            case RunEndRecord(d=d):
                return self._run_end(at, d.outcome, d.stop_reason)
            case EventRecord(d=d, o=o):
                return self._event(_key_of(d), seq, at, d.event, msgspec.to_builtins(o))
            case (
                PhaseStartRecord()
                | PhaseEndRecord()
                | RetryRecord()
                | GuardRecord()
                | DecisionRecord()
                | SkipRecord()
                | TransitionRecord()
            ):
                pass  # no span opens or ends there
            case _:
                assert_never(record)
        return []

    def add(self, seq: int, kind: str, at: float, d: dict[str, Any], o: dict[str, Any]) -> list[SpanRecord]:
        """Read one record given as plain values (a plain turn's, or one made by hand), any
        field possibly missing; returns the spans it ended (children before parents)."""
        self._last_at = max(self._last_at, at)
        key = _turn_key(d)
        if kind in ("header", "run_start"):
            run_id = o.get("run_id")
            self._name_run(run_id if isinstance(run_id, str) else None)
            if kind == "run_start":
                self._open_root(seq, at, str(d.get("pipeline") or "pipeline"))
        elif kind == "role_start":
            where = {name: d[name] for name in ("phase", "round", "attempt") if isinstance(d.get(name), str | int)}
            return self._role_start(key, seq, at, str(d.get("role") or ""), where)
        elif kind == "prompt":
            self._prompt(key, d.get("prompt") if isinstance(d.get("prompt"), str) else None, d.get("provider"))
        elif kind == "role_end":
            usage, failure, status = d.get("usage"), d.get("failure"), d.get("status")
            failure_kind = str(failure["kind"]) if isinstance(failure, dict) and failure.get("kind") else None
            return self._role_end(
                key,
                at,
                usage if isinstance(usage, dict) else None,
                failure_kind,
                None if status is None else str(status),
            )
        elif kind == "run_end":
            outcome = d.get("outcome")
            return self._run_end(at, outcome if isinstance(outcome, str) else None, str(d.get("stop_reason") or ""))
        elif kind == "event":
            event = d.get("event")
            if isinstance(event, dict):
                return self._event(key, seq, at, event, o)
        return []

    # -- the lifecycle -----------------------------------------------------------------

    def _name_run(self, run_id: str | None) -> None:
        if run_id and self.run_id is None:
            self.run_id = run_id

    def _open_root(self, seq: int, at: float, pipeline: str) -> None:
        self._root = _Open(seq, at, None, provider=_SELF)
        self._root.attributes.update(
            {
                "gen_ai.operation.name": "invoke_workflow",
                "gen_ai.workflow.name": pipeline,
                "seamline.pipeline": pipeline,
            }
        )
        if self.run_id:
            self._root.attributes["seamline.run_id"] = self.run_id

    def _role_start(
        self, key: TurnKey, seq: int, at: float, role: str, where: dict[str, AttributeValue]
    ) -> list[SpanRecord]:
        out = self._close_turn(key, at)
        turn = self._open_turn(key, seq, at)
        turn.attributes["gen_ai.agent.name"] = role
        for name, value in where.items():
            turn.attributes[f"seamline.{name}"] = value
        return out

    def _prompt(self, key: TurnKey, prompt: str | None, provider: Any) -> None:
        turn = self._turns.get(key)
        if turn is not None:
            turn.prompt = prompt
            if isinstance(provider, dict):
                if isinstance(provider.get("model"), str):
                    turn.model = turn.model or provider["model"]
                if isinstance(provider.get("provider"), str):
                    turn.provider = turn.provider or provider["provider"]
                turn.server = _server_of(provider.get("options"))
        elif key is None:  # a plain run's prompt comes before its session
            self._plain_prompt = prompt

    def _role_end(
        self, key: TurnKey, at: float, usage: dict[str, Any] | None, failure_kind: str | None, status: str | None
    ) -> list[SpanRecord]:
        turn = self._turns.get(key)
        if turn is not None:
            if not turn.usage and usage is not None:
                self._add_usage(turn, usage)
            if failure_kind:
                turn.error_type = failure_kind  # the role's classified failure wins
            elif status not in (None, "ok") and turn.error_type is None:
                turn.error_type = str(status)
        return self._close_turn(key, at)

    def _run_end(self, at: float, outcome: str | None, stop_reason: str) -> list[SpanRecord]:
        out: list[SpanRecord] = []
        for open_key in list(self._turns):
            out += self._close_turn(open_key, at)
        return out + self._close_root(at, outcome, stop_reason)

    def finish(self) -> list[SpanRecord]:
        """End whatever is still open (a run cut short), at the last time seen."""
        out: list[SpanRecord] = []
        for opened, _ in list(self._tools.values()):
            opened.error_type = opened.error_type or "incomplete"
        for key in sorted(self._turns, key=lambda k: self._turns[k].seq):
            out += self._close_turn(key, self._last_at, incomplete=True)
        if self._root is not None:
            self._root.error_type = self._root.error_type or "incomplete"
            out += self._close_root(self._last_at, None, "")
        return out

    # -- events inside a turn ----------------------------------------------------------

    def _event(self, key: TurnKey, seq: int, at: float, event: dict[str, Any], o: dict[str, Any]) -> list[SpanRecord]:
        kind = event.get("type")
        out: list[SpanRecord] = []
        turn: _Open | None
        if kind == "session":
            turn = self._turns.get(key) or self._open_turn(key, seq, at)
            turn.provider = str(event.get("provider") or "") or turn.provider
            turn.model = event.get("model") or turn.model
            if key is None and "gen_ai.agent.name" not in turn.attributes and turn.provider:
                turn.attributes["gen_ai.agent.name"] = turn.provider  # a plain run: the provider's agent
            session_id = o.get("session_id") or event.get("session_id")
            if self.run_id is None and isinstance(session_id, str):
                self.run_id = session_id  # a plain run: its session names it
            if isinstance(session_id, str):
                turn.attributes["gen_ai.conversation.id"] = session_id
            provider_session = o.get("provider_session_id") or event.get("provider_session_id")
            if isinstance(provider_session, str):
                turn.attributes["seamline.provider_session_id"] = provider_session
            return out
        turn = self._turns.get(key)
        if turn is None:
            return out
        if kind == "tool_call":
            call_id = str(event.get("call_id") or seq)
            tool = _Open(seq, at, turn)
            tool.attributes.update(self._provider_attributes(turn))
            tool.attributes.update(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": str(event.get("name") or ""),
                    "gen_ai.tool.call.id": call_id,
                    "gen_ai.tool.type": "function",
                    "seamline.tool.source": str(event.get("source") or "host"),
                }
            )
            if self.capture_content:
                tool.attributes["gen_ai.tool.call.arguments"] = json.dumps(event.get("arguments"), sort_keys=True)
            self._tools[(key, call_id)] = (tool, str(event.get("name") or ""))
            turn.calls_since_chat += 1
        elif kind == "tool_result":
            call_id = str(event.get("call_id") or "")
            found = self._tools.pop((key, call_id), None)
            if found is not None:
                tool, name = found
                if event.get("is_error"):
                    tool.error_type = "tool_error"
                if self.capture_content and isinstance(event.get("output"), str):
                    tool.attributes["gen_ai.tool.call.result"] = event["output"]
                out.append(self._span(tool, f"execute_tool {name}", "internal", at))
            turn.chat_start = at
        elif kind == "usage":
            out.append(self._chat(turn, seq, at, event, o))
            turn.chat_start = at
        elif kind == "error":
            error_type = str(event.get("kind") or "provider")
            turn.error_type = error_type
            out.append(self._chat(turn, seq, at, {}, o, error_type=error_type))  # the failed model call
            turn.chat_start = at
        elif kind == "text":
            turn.text = str(event.get("text") or "")
        elif kind == "complete":
            turn.text = str(event.get("text") or "") or turn.text
            outcome = str(event.get("outcome") or "")
            stop_reason = str(event.get("stop_reason") or "")
            turn.attributes["seamline.outcome"] = outcome
            turn.attributes["seamline.stop_reason"] = stop_reason
            turn.attributes["gen_ai.response.finish_reasons"] = (_finish_reason(stop_reason),)
            if outcome == "completed":
                turn.error_type = None  # an error the provider retried past is not the turn's
            elif outcome in ("failed", "budget") and turn.error_type is None:
                turn.error_type = "budget" if outcome == "budget" else "provider"
            if self._root is None:  # a plain run: the turn ends with its complete
                out += self._close_turn(key, at)
        return out

    def _chat(
        self,
        turn: _Open,
        seq: int,
        at: float,
        event: dict[str, Any],
        o: dict[str, Any],
        *,
        error_type: str | None = None,
    ) -> SpanRecord:
        model = str(event.get("model") or turn.model or "")
        chat = _Open(seq, turn.chat_start or turn.start, turn, error_type=error_type)
        chat.attributes.update(self._provider_attributes(turn))
        chat.attributes["gen_ai.operation.name"] = "chat"
        if model:
            chat.attributes["gen_ai.response.model"] = model
        usage_id = o.get("usage_id") or event.get("usage_id")
        if isinstance(usage_id, str):
            chat.attributes["seamline.usage_id"] = usage_id
            if turn.provider in _RESPONSE_IDS:
                chat.attributes["gen_ai.response.id"] = usage_id
        if turn.calls_since_chat:
            chat.attributes["gen_ai.response.finish_reasons"] = ("tool_call",)
        elif error_type is not None:
            chat.attributes["gen_ai.response.finish_reasons"] = ("error",)
        turn.calls_since_chat = 0
        if error_type is None:
            self._add_usage(chat, event)
            self._usage_attributes(chat)
            self._add_usage(turn, event)
        kind: SpanKind = "internal" if turn.provider in _EMBEDDED else "client"
        return self._span(chat, f"chat {turn.model or model}".rstrip(), kind, at)

    # -- opening and closing -----------------------------------------------------------

    def _open_turn(self, key: TurnKey, seq: int, at: float) -> _Open:
        turn = _Open(seq, at, self._root, chat_start=at)
        turn.attributes["gen_ai.operation.name"] = "invoke_agent"
        if key is None:
            turn.prompt = self._plain_prompt
        self._turns[key] = turn
        return turn

    def _close_turn(self, key: TurnKey, at: float, *, incomplete: bool = False) -> list[SpanRecord]:
        turn = self._turns.pop(key, None)
        if turn is None:
            return []
        out: list[SpanRecord] = []
        mine = sorted((k for k in self._tools if k[0] == key), key=lambda k: self._tools[k][0].seq)
        for tool_key in mine:
            tool, name = self._tools.pop(tool_key)
            tool.error_type = tool.error_type or "incomplete"
            out.append(self._span(tool, f"execute_tool {name}", "internal", at))
        if incomplete:
            turn.error_type = turn.error_type or "incomplete"
        turn.provider = turn.provider or _SELF  # a role seamline decides itself
        turn.attributes.update(self._provider_attributes(turn))
        self._usage_attributes(turn)
        if self.capture_content:
            if turn.prompt is not None:
                turn.attributes["gen_ai.input.messages"] = _messages("user", turn.prompt)
            if turn.text:
                reasons = turn.attributes.get("gen_ai.response.finish_reasons")
                finish = reasons[0] if isinstance(reasons, tuple) and reasons else None
                turn.attributes["gen_ai.output.messages"] = _messages("assistant", turn.text, finish_reason=finish)
        if self._root is not None and turn.usage:
            self._add_usage(self._root, turn.usage, cost=turn.cost, priced=turn.priced)
        if self._root is not None and turn.error_type and self._root.error_type is None:
            self._root.error_type = turn.error_type
        name = str(turn.attributes.get("gen_ai.agent.name") or turn.provider or "")
        kind: SpanKind = "client" if turn.provider in _OUT_OF_PROCESS else "internal"
        out.append(self._span(turn, f"invoke_agent {name}".rstrip(), kind, at))
        return out

    def _close_root(self, at: float, outcome: str | None, stop_reason: str) -> list[SpanRecord]:
        root = self._root
        if root is None:
            return []
        self._root = None
        if outcome is not None:
            root.attributes["seamline.outcome"] = outcome
            root.attributes["seamline.stop_reason"] = stop_reason
            if outcome == "completed":
                root.error_type = None  # a failed attempt the controller recovered from
            elif outcome == "budget":
                root.error_type = "budget"
            elif outcome != "aborted":
                root.error_type = root.error_type or stop_reason or outcome
        root.attributes.update(self._provider_attributes(root))
        self._usage_attributes(root)
        name = str(root.attributes.get("gen_ai.workflow.name") or "pipeline")
        return [self._span(root, f"invoke_workflow {name}", "internal", at)]

    def _span(self, opened: _Open, name: str, kind: SpanKind, end: float) -> SpanRecord:
        run_id = self.run_id or "run"
        attributes = dict(opened.attributes)
        kind_name = _OPENINFERENCE_KINDS.get(str(attributes.get("gen_ai.operation.name")))
        if kind_name is not None:
            attributes["openinference.span.kind"] = kind_name
        if opened.error_type:
            attributes["error.type"] = opened.error_type
        return SpanRecord(
            name=name,
            kind=kind,
            trace_id=trace_id_of(run_id),
            span_id=span_id_of(run_id, opened.seq),
            parent_id=span_id_of(run_id, opened.parent.seq) if opened.parent is not None else None,
            start_ns=_ns(opened.start),
            end_ns=max(_ns(end), _ns(opened.start)),
            attributes=attributes,
            error=opened.error_type is not None,
        )

    # -- attributes --------------------------------------------------------------------

    @staticmethod
    def _provider_attributes(turn: _Open) -> dict[str, AttributeValue]:
        attributes: dict[str, AttributeValue] = {}
        if turn.provider:
            attributes["gen_ai.provider.name"] = turn.provider
        if turn.model:
            attributes["gen_ai.request.model"] = turn.model
        conversation = turn.attributes.get("gen_ai.conversation.id")
        if conversation is not None:
            attributes["gen_ai.conversation.id"] = conversation
        if turn.server is not None:
            attributes["server.address"] = turn.server[0]
            if turn.server[1] is not None:
                attributes["server.port"] = turn.server[1]
        return attributes

    @staticmethod
    def _add_usage(
        target: _Open, usage: dict[str, Any], *, cost: float | None = None, priced: bool | None = None
    ) -> None:
        for key in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            value = usage.get(key)
            if isinstance(value, int):
                target.usage[key] = target.usage.get(key, 0) + value
        if "cost_usd" in usage or "priced" in usage:
            cost, priced = usage.get("cost_usd"), bool(usage.get("priced"))
        if priced is not None:
            target.priced = priced if target.priced is None else (target.priced and priced)
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            target.cost = (target.cost or 0.0) + float(cost)

    @staticmethod
    def _usage_attributes(target: _Open) -> None:
        names = {
            "input_tokens": "gen_ai.usage.input_tokens",
            "output_tokens": "gen_ai.usage.output_tokens",
            "cache_read_tokens": "gen_ai.usage.cache_read.input_tokens",
            "cache_write_tokens": "gen_ai.usage.cache_creation.input_tokens",
        }
        for key, name in names.items():
            if key in target.usage:
                target.attributes[name] = target.usage[key]
        if target.cost is not None:  # an unknown cost stays absent, never a zero
            target.attributes["seamline.cost_usd"] = target.cost
        if target.priced is not None:
            target.attributes["seamline.priced"] = target.priced


def _messages(role: str, text: str, *, finish_reason: str | None = None) -> str:
    message: dict[str, Any] = {"role": role, "parts": [{"type": "text", "content": text}]}
    if finish_reason is not None:
        message["finish_reason"] = finish_reason
    return json.dumps([message])


def _finish_reason(stop_reason: str) -> str:
    return _FINISH_REASONS.get(stop_reason, stop_reason or "stop")


def _key_of(d: RoleScopedData) -> TurnKey:
    """The turn of a role-scoped record."""
    return (d.phase, d.role, d.round, d.attempt)


def _turn_key(d: dict[str, Any]) -> TurnKey:
    """Which turn a record belongs to: a pipeline role's (phase, role, round, attempt), or
    None for a plain run's records (and the controller's own)."""
    if "role" not in d:
        return None
    return (d.get("phase"), d.get("role"), d.get("round"), d.get("attempt"))


def _server_of(options: Any) -> tuple[str, int | None] | None:
    """``server.address`` and ``server.port`` of a provider's ``base_url`` option, if any."""
    url = options.get("base_url") if isinstance(options, dict) else None
    if not isinstance(url, str) or "://" not in url:
        return None
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    try:
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        port = None
    return parts.hostname, port
