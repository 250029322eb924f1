"""seamline runs as A2A tasks: a run is a task (its id is the run's id), the session it
runs on is the task's context, and the run's events become the task's status updates and
its answer artifact.

States: a queued run is ``submitted``, a running one ``working``, one waiting on a
permission request that a client must answer ``input-required`` (the status message
names the tool, its arguments and how to answer), and a finished one ``completed``,
``failed`` (a failure or a spent budget; the status message says why) or ``canceled``
(aborted). Tool calls, tool results, permission decisions, file changes, errors and the
agent's text blocks arrive as ``working`` status messages while the run goes; the final
answer is the artifact ``answer`` (one text part), sent once the run completes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

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
from seamline.server.a2a_wire import (
    Artifact,
    ArtifactUpdate,
    Message,
    Part,
    StreamResponse,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdate,
    timestamp,
)
from seamline.server.runs import Run

__all__ = [
    "ANSWER",
    "ANSWER_PROMPT",
    "PipelineTasks",
    "TaskTranslator",
    "asked_before",
    "state_of",
    "task_of",
    "waiting",
]

ANSWER: Final = "answer"  # the name of the artifact that holds the run's final text
_OUTPUT_SHOWN: Final = 2000  # characters of a tool's output a status message carries
_FINAL_STATE: Final[dict[str, TaskState]] = {
    "completed": "TASK_STATE_COMPLETED",
    "failed": "TASK_STATE_FAILED",
    "budget": "TASK_STATE_FAILED",
    "aborted": "TASK_STATE_CANCELED",
}
# What a task never shows: deltas (the answer comes whole), usage, reasoning, modes.
_SILENT: Final = frozenset({TextDelta, ReasoningDelta, Reasoning, Usage, Mode, ToolProgress})
ANSWER_PROMPT: Final = (
    "reply on this task with 'allow' or 'deny' (text), or a data part "
    '{"decision": "allow"|"deny", "scope": "once"|"session"|"always"}'
)


def waiting(run: Run) -> list[PermissionRequest]:
    """The permission requests the run waits on and nobody has answered yet."""
    return [request for request, future in run.pending.values() if not future.done()]


def state_of(run: Run) -> TaskState:
    if run.done:
        return _FINAL_STATE.get(run.status, "TASK_STATE_FAILED")
    if run.status == "queued":
        return "TASK_STATE_SUBMITTED"
    return "TASK_STATE_INPUT_REQUIRED" if waiting(run) else "TASK_STATE_WORKING"


def _agent_message(run: Run, context_id: str, key: str, parts: list[Part], event: str) -> Message:
    return Message(
        message_id=f"{run.id}-{key}",
        context_id=context_id,
        task_id=run.id,
        role="ROLE_AGENT",
        parts=parts,
        metadata={"seamline_event": event},
    )


def _request_message(run: Run, context_id: str, request: PermissionRequest) -> Message:
    shown = {
        "request_id": request.request_id,
        "call_id": request.call_id,
        "tool": request.tool,
        "arguments": request.arguments,
        "reason": request.reason,
    }
    text = f"permission wanted: {request.tool} {_brief(request.arguments)}; {ANSWER_PROMPT}"
    return _agent_message(
        run, context_id, f"ask-{request.request_id}", [Part(text=text), Part(data=shown)], "permission_request"
    )


def _brief(arguments: dict[str, Any]) -> str:
    shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return f"({shown[:200]}{'…' if len(shown) > 200 else ''})"


def _failure(run: Run, context_id: str, outcome: str, stop_reason: str | None) -> Message:
    errors = [e for e in run.events if isinstance(e, Error)]
    if outcome == "budget":
        text = f"the run's budget is spent ({stop_reason})"
    elif errors:
        text = f"{errors[-1].kind}: {errors[-1].message}"
    else:
        text = f"the run failed ({stop_reason})"
    return _agent_message(run, context_id, "failure", [Part(text=text)], "complete")


def _answer_artifact(run: Run, text: str) -> Artifact:
    return Artifact(artifact_id=f"{run.id}-{ANSWER}", name=ANSWER, parts=[Part(text=text)])


def asked_before(run: Run, after: int) -> PermissionRequest | None:
    """A request the run waits on that was announced within its first ``after`` events
    (a reader following from ``after`` on would never see it)."""
    later = {e.request_id for e in run.events[after:] if isinstance(e, PermissionRequest)}
    return next((r for r in waiting(run) if r.request_id not in later), None)


def task_of(run: Run, context_id: str, *, history_length: int | None = None, state: TaskState | None = None) -> Task:
    """The run as a task now: its state, its answer once complete, and the prompt as its
    history. ``state``: the task as it was at that state (a stream's first frame, whose
    updates follow), without its answer."""
    told = state
    state = state or state_of(run)
    message: Message | None = None
    if told is not None:
        pass
    elif state == "TASK_STATE_INPUT_REQUIRED":
        message = _request_message(run, context_id, waiting(run)[0])
    elif state == "TASK_STATE_FAILED":
        message = _failure(run, context_id, run.status, run.stop_reason)
    status = TaskStatus(state=state, timestamp=timestamp(run.finished_at or None))
    if message is not None:
        status.message = message
    artifacts: list[Artifact] = []
    final = next((e for e in reversed(run.events) if isinstance(e, Complete)), None)
    if told is None and run.done and final is not None and final.outcome == "completed" and final.text:
        artifacts.append(_answer_artifact(run, final.text))
    history = [
        Message(
            message_id=f"{run.id}-prompt",
            context_id=context_id,
            task_id=run.id,
            role="ROLE_USER",
            parts=[Part(text=run.prompt)],
        )
    ]
    if history_length is not None:
        history = history[len(history) - history_length :] if history_length > 0 else []
    return Task(
        id=run.id,
        context_id=context_id,
        status=status,
        artifacts=artifacts,
        history=history,
        metadata={"seamline_session_id": run.session_id or "", "seamline_run_id": run.id},
    )


@dataclass
class PipelineTasks:
    """The pipeline runs started over A2A: a pipeline run has no session, so its agent and
    context are kept here (for as long as the hub keeps the run)."""

    runs: dict[str, tuple[str, str]] = field(default_factory=dict)  # run id -> (agent, context id)

    def add(self, run_id: str, agent: str, context_id: str, held: Any) -> None:
        """Remember a run; forget those the hub (``held``: its runs) no longer holds."""
        gone = [r for r in self.runs if r not in held]
        for r in gone:
            del self.runs[r]
        self.runs[run_id] = (agent, context_id)


@dataclass
class TaskTranslator:
    """Turns a run's events, in order, into the task's stream responses. ``finished``:
    the task reached a final state or stopped for input (a stream ends there)."""

    run: Run
    context_id: str
    finished: bool = False
    _number: int = 0
    _roles: int = 0  # in a pipeline, the roles' turns begun and not complete yet

    @classmethod
    def reading_from(cls, run: Run, context_id: str, after: int) -> TaskTranslator:
        """A translator for a reader that starts after event ``after``: in a pipeline, the
        roles' turns begun before it and not complete yet are counted, so their ends are
        not taken for the run's."""
        translator = cls(run, context_id)
        if run.pipeline is not None:
            for event in run.events[:after]:
                if isinstance(event, Session):
                    translator._roles += 1
                elif isinstance(event, Complete) and translator._roles > 0:
                    translator._roles -= 1
        return translator

    def ask(self, request: PermissionRequest) -> StreamResponse:
        """The task stops for the client's answer to ``request``."""
        self.finished = True
        return self._status("TASK_STATE_INPUT_REQUIRED", _request_message(self.run, self.context_id, request))

    def _status(self, state: TaskState, message: Message | None = None) -> StreamResponse:
        status = TaskStatus(state=state, timestamp=timestamp())
        if message is not None:
            status.message = message
        return StreamResponse(
            status_update=TaskStatusUpdate(task_id=self.run.id, context_id=self.context_id, status=status)
        )

    def _working(self, event: str, parts: list[Part]) -> StreamResponse:
        message = _agent_message(self.run, self.context_id, f"{event}-{self._number}", parts, event)
        return self._status("TASK_STATE_WORKING", message)

    def feed(self, event: Event, number: int) -> list[StreamResponse]:
        """The stream responses of the run's event ``number`` (from 1; it names the
        status messages, so they stay unique across streams of one task)."""
        if self.finished or type(event) in _SILENT:
            return []  # deltas are most of a run's events: they cost one set lookup here
        self._number = number
        match event:
            case Text():
                return [self._working("text", [Part(text=event.text)])] if event.text else []
            case ToolCall():
                data = {"call_id": event.call_id, "name": event.name, "arguments": event.arguments}
                return [self._working("tool_call", [Part(text=f"tool {event.name}"), Part(data=data)])]
            case ToolResult():
                output = event.output[:_OUTPUT_SHOWN]
                result = {"call_id": event.call_id, "is_error": event.is_error, "output": output}
                return [self._working("tool_result", [Part(data=result)])]
            case PermissionRequest():
                pending = self.run.pending.get(event.request_id)
                if pending is None or pending[1].done() or not self.run.asked(event):
                    return []  # decided by a rule or yes, or already answered: a decision follows
                return [self.ask(event)]
            case PermissionDecision():
                data = {"request_id": event.request_id, "decision": event.decision, "scope": event.scope}
                return [self._working("permission_decision", [Part(text=event.decision), Part(data=data)])]
            case FileChange():
                return [self._working("file_change", [Part(data={"path": event.path, "kind": event.kind})])]
            case Error():
                return [self._working("error", [Part(text=f"{event.kind}: {event.message}")])]
            case Session() if self.run.pipeline is not None:
                self._roles += 1
                role: dict[str, Any] = {
                    "session_id": event.session_id,
                    "provider": event.provider,
                    "model": event.model,
                }
                return [self._working("role_started", [Part(data=role)])]
            case Raw() if self.run.pipeline is not None and isinstance(event.payload, dict):
                if event.payload.get("what") != "transition" or not isinstance(event.payload.get("target"), str):
                    return []
                return [self._working("transition", [Part(text=f"phase {event.payload['target']}")])]
            case Complete() if self._roles > 0:  # a role's turn ended, not the pipeline run
                self._roles -= 1
                data = {"outcome": event.outcome, "stop_reason": event.stop_reason}
                return [self._working("role_complete", [Part(data=data)])]
            case Complete():
                return self._complete(event)
            case _:
                return []  # deltas, usage, raw payloads, reasoning, modes: not part of the task

    def _complete(self, event: Complete) -> list[StreamResponse]:
        self.finished = True
        out: list[StreamResponse] = []
        if event.outcome == "completed" and event.text:
            out.append(
                StreamResponse(
                    artifact_update=ArtifactUpdate(
                        task_id=self.run.id,
                        context_id=self.context_id,
                        artifact=_answer_artifact(self.run, event.text),
                        last_chunk=True,
                    )
                )
            )
        state = _FINAL_STATE.get(event.outcome, "TASK_STATE_FAILED")
        message = None
        if state == "TASK_STATE_FAILED":
            message = _failure(self.run, self.context_id, event.outcome, event.stop_reason)
        out.append(self._status(state, message))
        return out
