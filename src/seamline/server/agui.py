"""seamline events as AG-UI events, built with the ``ag-ui-protocol`` models.

The mapping (docs/serve.md has the table): text and its deltas become TEXT_MESSAGE_START /
CONTENT / END; reasoning becomes REASONING_START, REASONING_MESSAGE_* and REASONING_END;
a tool call becomes TOOL_CALL_START / ARGS / END and its result TOOL_CALL_RESULT; a
permission request becomes a CUSTOM event ``seamline.permission_request`` that a live
client answers through the permissions route, or, for clients that asked for interrupts,
a RUN_FINISHED with an interrupt outcome; usage adds up into RUN_FINISHED.usage with the
cost in metadata (absent when unknown, never 0); ``complete`` becomes RUN_FINISHED
(success, or cancelled for aborted and budget runs) or RUN_ERROR for failed ones. The
rest (file changes, progress, decisions, errors before the end, mode) are CUSTOM events
named ``seamline.<type>``; provider-native payloads are RAW events.

The translation is a pure function of the event sequence, so a stream can be resumed:
:meth:`AgUiTranslator.feed` is replayed over the events a reader already had.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Final

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    CustomEvent,
    Interrupt,
    RawEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuccessOutcome,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from seamline.events import (
    Complete,
    Error,
    Event,
    PermissionRequest,
    Raw,
    Reasoning,
    ReasoningDelta,
    Session,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
    encode_event,
)

__all__ = ["PERMISSION_RESPONSE_SCHEMA", "AgUiTranslator"]

PERMISSION_RESPONSE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["decision"],
    "properties": {
        "decision": {"type": "string", "enum": ["allow", "deny"]},
        "scope": {"type": "string", "enum": ["once", "session", "always"], "default": "once"},
    },
    "additionalProperties": False,
}


class AgUiTranslator:
    """Turns one run's seamline events into AG-UI events, keeping the open message state.

    ``interrupts``: a permission request ends the AG-UI run with an interrupt outcome
    (the seamline run goes on waiting for the answer); the events after it open a new
    AG-UI run whose ``parentRunId`` is the interrupted one.

    ``thread_id`` and ``run_ids`` name the AG-UI thread and the run of each segment the
    way a client chose them (``POST /v1/agui``); by default the thread is the session (the
    run, for a pipeline) and the runs are ``RUN``, ``RUN.1``, ...; ``run_ids`` is read as
    segments open, so a caller may append to it while a run goes on. ``asked`` tells a
    request that waited for an answer from one decided at once (``yes``, a rule): only the
    first is an interrupt; the events do not say which, so without it every one is.
    """

    def __init__(
        self,
        run_id: str,
        *,
        base_url: str = "",
        interrupts: bool = False,
        pipeline: str | None = None,
        first_phase: str | None = None,
        thread_id: str | None = None,
        run_ids: list[str] | None = None,
        asked: Callable[[PermissionRequest], bool] | None = None,
    ) -> None:
        self.run_id = run_id
        self.asked = asked
        self.fixed_thread_id = thread_id
        self.run_ids = run_ids if run_ids is not None else []  # the AG-UI run id of each segment
        self.pipeline = pipeline
        self.phase = first_phase or "agent"
        self.subagents: list[str] = []
        self.base_url = base_url
        self.interrupts = interrupts
        self.thread_id = ""
        self.agui_run_id = self._segment_id(0)
        self.segment = 0
        self.started = False
        self.finished = False
        self.text_id: str | None = None
        self.streamed = False
        self.reasoning_streamed = False
        self.reasoning_id: str | None = None
        self.last_message_id: str | None = None  # the message the tool calls of this step belong to
        self.messages = 0
        self.usage: dict[tuple[str | None, str | None], dict[str, int]] = {}
        self.cost: float | None = 0.0
        self.last_error: Error | None = None
        self.provider: str | None = None

    def _segment_id(self, segment: int) -> str:
        """The AG-UI run id of a segment: the one a client named (``run_ids``), else
        ``RUN`` for the first and ``RUN.K`` for the K-th after an interrupt."""
        if segment < len(self.run_ids):
            return self.run_ids[segment]
        return self.run_id if segment == 0 else f"{self.run_id}.{segment}"

    def _id(self, kind: str) -> str:
        self.messages += 1
        return f"{self.run_id}-{kind}{self.messages}"

    def feed(self, event: Event) -> Iterator[BaseEvent]:
        """The AG-UI events for one seamline event, in order."""
        if self.pipeline is None:
            yield from self._feed(event)
            return
        # In a pipeline, what a role's agent does belongs to its subagent (when one is open).
        for out in self._feed(event):
            if len(self.subagents) == 1 and getattr(out, "subagent_run_id", "") is None:
                out.subagent_run_id = self.subagents[0]  # type: ignore[attr-defined]
            yield out

    def _feed(self, event: Event) -> Iterator[BaseEvent]:
        if not self.started:
            self.started = True
            if self.pipeline is None and isinstance(event, Session):
                self.thread_id = self.fixed_thread_id or event.session_id
                self.provider = event.provider
                yield RunStartedEvent(
                    thread_id=self.thread_id,
                    run_id=self.agui_run_id,
                    protocol_version=PROTOCOL_VERSION,
                    metadata={"seamline.provider": event.provider, "seamline.model": event.model},
                )
                return
            self.thread_id = self.fixed_thread_id or self.run_id
            yield RunStartedEvent(
                thread_id=self.thread_id,
                run_id=self.agui_run_id,
                protocol_version=PROTOCOL_VERSION,
                metadata={"seamline.pipeline": self.pipeline},
            )
        if self.finished:
            # The run goes on after an interrupt: a new AG-UI run continues it.
            self.segment += 1
            self.finished = False
            parent, self.agui_run_id = self.agui_run_id, self._segment_id(self.segment)
            yield RunStartedEvent(
                thread_id=self.thread_id,
                run_id=self.agui_run_id,
                parent_run_id=parent,
                protocol_version=PROTOCOL_VERSION,
            )
        if self.pipeline is not None:
            if isinstance(event, Session):
                yield from self._close_text()
                yield from self._close_reasoning()
                self.provider = self.provider or event.provider
                self.subagents.append(event.session_id)
                self.last_message_id = None  # a subagent's tool call never belongs to another's text
                yield SubagentStartedEvent(
                    subagent_run_id=event.session_id,
                    name=self.phase,
                    description=f"{event.provider} {event.model or ''}".strip(),
                )
                return
            if isinstance(event, Complete) and self.subagents:
                yield from self._close_text()
                yield from self._close_reasoning()
                yield self._subagent_end(self.subagents.pop(0), event)  # the oldest open one
                self.last_message_id = None
                return
            if isinstance(event, Raw) and isinstance(event.payload, dict):
                if event.payload.get("what") == "transition" and isinstance(event.payload.get("target"), str):
                    self.phase = event.payload["target"]
        if type(event) is TextDelta:
            if not event.text:
                return
            yield from self._close_reasoning()
            if self.text_id is None:
                self.text_id = self.last_message_id = self._id("m")
                yield TextMessageStartEvent(message_id=self.text_id, role="assistant")
            self.streamed = True
            yield TextMessageContentEvent(message_id=self.text_id, delta=event.text)
        elif isinstance(event, Text):
            yield from self._close_reasoning()
            if self.streamed:
                # The block that closes streamed deltas (a tool call may have come between).
                self.streamed = False
                yield from self._close_text()
            elif self.text_id is None:
                if not event.text:
                    return
                message_id = self.last_message_id = self._id("m")
                yield TextMessageStartEvent(message_id=message_id, role="assistant")
                yield TextMessageContentEvent(message_id=message_id, delta=event.text)
                yield TextMessageEndEvent(message_id=message_id)
            else:
                yield from self._close_text()
        elif isinstance(event, ReasoningDelta):
            if not event.text:
                return
            yield from self._close_text()
            yield from self._open_reasoning()
            assert self.reasoning_id is not None
            self.reasoning_streamed = True
            yield ReasoningMessageContentEvent(message_id=self.reasoning_id, delta=event.text)
        elif isinstance(event, Reasoning):
            yield from self._close_text()
            if self.reasoning_streamed:
                self.reasoning_streamed = False
            elif self.reasoning_id is None and event.text:
                yield from self._open_reasoning()
                assert self.reasoning_id is not None
                yield ReasoningMessageContentEvent(message_id=self.reasoning_id, delta=event.text)
            yield from self._close_reasoning()
        elif isinstance(event, ToolCall):
            yield from self._close_text()
            yield from self._close_reasoning()
            call_id = self._call_id(event.call_id)
            if self.last_message_id is None:
                # The step said nothing before its calls: they still share one assistant
                # message (a client makes it from this id), not one message per call.
                self.last_message_id = self._id("m")
            yield ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=event.name,
                parent_message_id=self.last_message_id,
                metadata={"seamline.source": event.source, "seamline.call_id": event.call_id},
            )
            yield ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(event.arguments))
            yield ToolCallEndEvent(tool_call_id=call_id)
        elif isinstance(event, ToolResult):
            # The model's next step starts after a result: its tool calls belong to its own
            # message (its text, or a new id), never to this step's.
            self.last_message_id = None
            call_id = self._call_id(event.call_id)
            yield ToolCallResultEvent(
                message_id=f"{self.run_id}-result-{call_id}",
                tool_call_id=call_id,
                content=event.output,
                role="tool",
                metadata={"seamline.is_error": event.is_error},
            )
        elif isinstance(event, PermissionRequest):
            yield from self._permission(event)
        elif isinstance(event, Usage):
            key = (self.provider, event.model)
            counts = self.usage.setdefault(key, {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0})
            counts["input"] += event.input_tokens
            counts["output"] += event.output_tokens
            counts["cache_read"] += event.cache_read_tokens
            counts["cache_write"] += event.cache_write_tokens
            self.cost = None if self.cost is None or event.cost_usd is None else self.cost + event.cost_usd
        elif isinstance(event, Raw):
            yield RawEvent(event=event.payload, source=event.source)
        elif isinstance(event, Complete):
            yield from self._close_text()
            yield from self._close_reasoning()
            # A run paused at its budget goes on once raised: as after an interrupt, in a new AG-UI run.
            self.finished = event.outcome == "budget" and event.stop_reason == "paused"
            yield self._end(event)
        else:
            if isinstance(event, Error):
                self.last_error = event
            yield CustomEvent(name=f"seamline.{event.type}", value=_plain(event))

    def _permission(self, event: PermissionRequest) -> Iterator[BaseEvent]:
        respond = f"{self.base_url}/v1/runs/{self.run_id}/permissions/{event.request_id}"
        if not self.interrupts or (self.asked is not None and not self.asked(event)):
            yield CustomEvent(
                name="seamline.permission_request",
                value={**_plain(event), "respond": respond, "response_schema": PERMISSION_RESPONSE_SCHEMA},
            )
            return
        yield from self._close_text()
        yield from self._close_reasoning()
        self.finished = True
        yield RunFinishedEvent(
            thread_id=self.thread_id,
            run_id=self.agui_run_id,
            outcome=RunFinishedInterruptOutcome(
                interrupts=[
                    Interrupt(
                        id=event.request_id,
                        reason="tool_approval",
                        message=f"allow {event.tool}? {event.reason}".strip(),
                        tool_call_id=None if event.call_id is None else self._call_id(event.call_id),
                        response_schema=PERMISSION_RESPONSE_SCHEMA,
                        metadata={"seamline.respond": respond, "seamline.arguments": event.arguments},
                    )
                ]
            ),
        )

    def _call_id(self, call_id: str) -> str:
        """The AG-UI id of a tool call: in a pipeline, a role's calls are named after its
        subagent, since each role's agent numbers its calls from the start (``c1`` twice)."""
        if self.pipeline is not None and len(self.subagents) == 1:
            return f"{self.subagents[0]}.{call_id}"
        return call_id

    def _subagent_end(self, subagent: str, event: Complete) -> BaseEvent:
        if event.outcome == "completed":
            return SubagentFinishedEvent(
                subagent_run_id=subagent, result=event.text, outcome=SubagentFinishedSuccessOutcome()
            )
        message = self.last_error.message if self.last_error is not None else f"{event.outcome} ({event.stop_reason})"
        return SubagentErrorEvent(
            subagent_run_id=subagent,
            message=message,
            code=event.stop_reason,
            metadata={"seamline.outcome": event.outcome},
        )

    def _open_reasoning(self) -> Iterator[BaseEvent]:
        if self.reasoning_id is None:
            self.reasoning_id = self._id("r")
            yield ReasoningStartEvent(message_id=self.reasoning_id)
            yield ReasoningMessageStartEvent(message_id=self.reasoning_id, role="reasoning")

    def _close_reasoning(self) -> Iterator[BaseEvent]:
        if self.reasoning_id is not None:
            yield ReasoningMessageEndEvent(message_id=self.reasoning_id)
            yield ReasoningEndEvent(message_id=self.reasoning_id)
            self.reasoning_id = None

    def _close_text(self) -> Iterator[BaseEvent]:
        if self.text_id is not None:
            yield TextMessageEndEvent(message_id=self.text_id)
            self.text_id = None

    def _token_usage(self) -> list[TokenUsage] | None:
        if not self.usage:
            return None
        return [
            TokenUsage(
                provider=provider,
                model=model,
                input_tokens=c["input"],
                output_tokens=c["output"],
                total_tokens=c["input"] + c["output"],
                cached_input_tokens=c["cache_read"],
                cache_write_input_tokens=c["cache_write"],
            )
            for (provider, model), c in self.usage.items()
        ]

    def _end(self, event: Complete) -> BaseEvent:
        metadata: dict[str, Any] = {"seamline.outcome": event.outcome, "seamline.stop_reason": event.stop_reason}
        if self.usage and self.cost is not None:
            metadata["seamline.cost_usd"] = self.cost  # unknown cost stays absent, never 0
        if event.outcome == "failed":
            message = self.last_error.message if self.last_error is not None else f"run failed ({event.stop_reason})"
            return RunErrorEvent(message=message, code=event.stop_reason, usage=self._token_usage(), metadata=metadata)
        outcome: RunFinishedSuccessOutcome | RunFinishedCancelledOutcome = (
            RunFinishedSuccessOutcome() if event.outcome == "completed" else RunFinishedCancelledOutcome()
        )
        return RunFinishedEvent(
            thread_id=self.thread_id,
            run_id=self.agui_run_id,
            result=event.text,
            outcome=outcome,
            usage=self._token_usage(),
            metadata=metadata,
        )


def _plain(event: Event) -> Any:
    return json.loads(encode_event(event))
