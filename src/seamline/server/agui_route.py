"""``POST /v1/agui``: the one agent URL a stock AG-UI client (``HttpAgent``) talks to.

The client POSTs a ``RunAgentInput`` and reads the AG-UI stream back from the same
response. ``threadId`` names a seamline session (opened on first use, found again by its
metadata ``agui_thread_id``); the last user message is the prompt of a new run on it;
``runId`` is the AG-UI run id of the stream (RUN_STARTED, RUN_FINISHED). Permission
requests are interrupts: the stream ends with a RUN_FINISHED whose outcome is
``interrupt`` while the seamline run waits; the client's next POST on the thread carries
``resume`` (one entry per interrupt: ``resolved`` with ``{"decision": "allow"|"deny",
"scope"}``, or ``cancelled``, which denies) and streams the rest of that run under its new
``runId``. Frames carry ``id: N.K`` as on ``GET /v1/runs/RUN/events``; the same POST again
with ``Last-Event-ID`` reads that run's stream on from there.

How the session is opened comes from ``forwardedProps.seamline`` (provider, model,
options, workspace, yes, max_steps, budget_usd), or, on ``/v1/agents/NAME/agui``, from the
declared agent NAME of `--agents FILE` (:func:`resolve_agent`).

``forwardedProps.seamline.pipeline`` (the only key taken on ``/v1/agents/NAME/agui``) runs
that built-in pipeline on the prompt instead, as ``POST /v1/pipelines/NAME/runs`` does: its
roles stream as AG-UI subagents under the client's ``threadId`` and ``runId``; a pipeline
run has no session of the thread and keeps none of its history.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from ag_ui.core import RunAgentInput
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from seamline.errors import InvalidRequest
from seamline.events import PermissionRequest
from seamline.server.agui import AgUiTranslator
from seamline.server.api_models import AgentChoice, AgUiRunInput, ResumeHeaders
from seamline.server.operations import Reply, operation
from seamline.server.runs import Busy, NotFound, Run, RunHub
from seamline.server.state import run_hub, state_value
from seamline.tools.permissions import PermissionAnswer

__all__ = ["AgUiThreads", "AgentChoice", "agent_agui", "agui", "agui_threads", "resolve_agent"]

HEARTBEAT: Final = 15.0
THREAD_KEY: Final = "agui_thread_id"
AGENT_KEY: Final = "agui_agent"
_WHOLE: Final = 2**62
_SCAN: Final = 10_000  # stored sessions looked through for a thread this process does not know


def resolve_agent(hub: RunHub, name: str) -> AgentChoice:
    """The declared agent ``name`` (``/v1/agents/NAME/agui``, from ``seamline serve --agents
    FILE``); an unknown name is a 404. Its provider, model, options, sandbox and workspace
    roots are the operator's: the session is opened as that agent (see :func:`_session_for`)."""
    spec = hub.policy.require_agent(name)
    # An AG-UI client cannot ask for yes; an agent the operator declared with yes = true has it.
    return AgentChoice(provider=spec.provider, yes=spec.yes)


@dataclass(eq=False)
class ThreadRun:
    """A seamline run streamed to an AG-UI thread, and the AG-UI run id of each segment
    (the first, then one per resume after an interrupt)."""

    thread_id: str
    run: Run
    run_ids: list[str] = field(default_factory=list)

    def asked(self, request: PermissionRequest) -> bool:
        """Whether the request waited for an answer (an interrupt), rather than being
        decided at once by ``yes`` or a rule."""
        return self.run.asked(request)


@dataclass(eq=False)
class AgUiThreads:
    """Which session each thread is, and which run each AG-UI run id streamed."""

    sessions: dict[str, str] = field(default_factory=dict)  # thread key -> session id
    current: dict[str, ThreadRun] = field(default_factory=dict)  # thread key -> its newest run
    by_run_id: dict[tuple[str, str], tuple[ThreadRun, int]] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def forget(self, hub: RunHub) -> None:
        """Drop the runs the hub has forgotten (it keeps the newest finished ones)."""
        gone = {id(t) for t, _ in self.by_run_id.values() if t.run.done and t.run.id not in hub.runs}
        if gone:
            self.by_run_id = {k: v for k, v in self.by_run_id.items() if id(v[0]) not in gone}
            self.current = {k: t for k, t in self.current.items() if id(t) not in gone}


_AGUI_ERRORS: Final = (400, 404, 409, 413)
_STREAM: Final = {
    200: Reply(
        "the run's AG-UI stream over SSE (ids N.K), until the run ends or an interrupt",
        str,
        media=("text/event-stream",),
    )
}


def agui_threads(request: Request) -> AgUiThreads:
    """The app's threads (``app.state.agui_threads``, set by ``create_app``)."""
    return state_value(request.app.state, "agui_threads", AgUiThreads)


@operation(
    "run the agent for an AG-UI client (HttpAgent): a new run on the thread's session, "
    "or, with resume, the rest of the interrupted one; Last-Event-ID reads a run on",
    replies=_STREAM,
    body=AgUiRunInput,
    headers=ResumeHeaders,
    errors=_AGUI_ERRORS,
)
async def agui(request: Request) -> Response:
    return await _serve(run_hub(request), agui_threads(request), request, agent=None)


@operation(
    "the same for the declared agent NAME",
    replies=_STREAM,
    body=AgUiRunInput,
    headers=ResumeHeaders,
    errors=_AGUI_ERRORS,
)
async def agent_agui(request: Request) -> Response:
    hub = run_hub(request)
    name = request.path_params["name"]
    resolve_agent(hub, name)  # 404 before the body is read
    return await _serve(hub, agui_threads(request), request, agent=name)


async def _input(request: Request) -> RunAgentInput:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise InvalidRequest("send the RunAgentInput as JSON (Content-Type: application/json)")
    raw = await request.body()
    try:
        return RunAgentInput.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5])
        raise InvalidRequest(f"invalid RunAgentInput: {problems}") from None


def _choice(hub: RunHub, body: RunAgentInput, agent: str | None) -> AgentChoice:
    props = body.forwarded_props if isinstance(body.forwarded_props, dict) else {}
    given = props.get("seamline")
    if agent is not None:
        declared = resolve_agent(hub, agent)
        if given is None:
            return declared
        pipeline = given.get("pipeline") if isinstance(given, dict) and set(given) == {"pipeline"} else None
        if not isinstance(pipeline, str):
            raise InvalidRequest(
                f"agent {agent!r} is declared on the server; forwardedProps.seamline takes only a pipeline to run"
            )
        return msgspec.structs.replace(declared, pipeline=pipeline)
    if given is None:
        return AgentChoice()
    try:
        return msgspec.convert(given, AgentChoice)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"invalid forwardedProps.seamline: {exc}") from None


def _prompt(body: RunAgentInput) -> str:
    for message in reversed(body.messages):
        if message.role != "user":
            continue
        content: Any = message.content
        if isinstance(content, str):
            text = content
        else:
            text = "\n".join(getattr(part, "text", "") for part in content if getattr(part, "type", "") == "text")
        if text.strip():
            return text
        break
    raise InvalidRequest("the input has no user message with text to run (messages: the last user message)")


def _parse_last(value: str) -> tuple[int, int]:
    seq, _, part = value.partition(".")
    try:
        numbers = int(seq), int(part) if part else _WHOLE  # N alone: all of event N was read
    except ValueError:
        raise InvalidRequest(f"Last-Event-ID is N or N.K, not {value[:40]!r}") from None
    if numbers[0] < 0 or numbers[1] < -1:
        raise InvalidRequest(f"Last-Event-ID is N or N.K, not {value[:40]!r}")
    return numbers


async def _session_for(
    hub: RunHub, threads: AgUiThreads, key: str, thread_id: str, agent: str | None, choice: AgentChoice
) -> str:
    known = threads.sessions.get(key)
    if known is not None and known in hub.sessions:
        return known
    for record in hub.store.list_sessions(limit=_SCAN):  # a thread this process has not seen yet
        if record.metadata.get(THREAD_KEY) == thread_id and record.metadata.get(AGENT_KEY) == agent:
            threads.sessions[key] = record.id
            return record.id
    metadata: dict[str, Any] = {THREAD_KEY: thread_id}
    if agent is not None:
        metadata[AGENT_KEY] = agent
    if agent is not None:  # the operator's agent: its provider, options, sandbox and roots
        slot = await hub.open_session(agent=agent, workspace=choice.workspace, yes=choice.yes, metadata=metadata)
    else:
        slot = await hub.open_session(
            provider=choice.provider,
            model=choice.model,
            options=choice.options,
            workspace=choice.workspace,
            yes=choice.yes,
            metadata=metadata,
        )
    threads.sessions[key] = slot.session.session_id
    return slot.session.session_id


async def _start(
    hub: RunHub, threads: AgUiThreads, key: str, thread_id: str, agent: str | None, choice: AgentChoice, prompt: str
) -> Run:
    """A turn on the thread's session, or a run of the pipeline the client named."""
    if choice.pipeline is not None:
        if agent is not None:  # the operator's agent plays every role
            return await hub.start_pipeline(
                choice.pipeline, prompt, agent=agent, workspace=choice.workspace, yes=choice.yes
            )
        return await hub.start_pipeline(
            choice.pipeline,
            prompt,
            provider=choice.provider,
            model=choice.model,
            options=choice.options,
            workspace=choice.workspace,
            yes=choice.yes,
            max_steps=choice.max_steps,
            budget_usd=choice.budget_usd,
        )
    session_id = await _session_for(hub, threads, key, thread_id, agent, choice)
    return await hub.start_run(
        session_id,
        prompt,
        max_steps=choice.max_steps,
        budget_usd=choice.budget_usd,
        options=choice.options,
        yes=choice.yes,
    )


def _answer(entry: Any) -> PermissionAnswer:
    if entry.status == "cancelled":
        return PermissionAnswer("deny", "once")
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    decision, scope = payload.get("decision"), payload.get("scope", "once")
    if decision not in ("allow", "deny") or scope not in ("once", "session", "always"):
        raise InvalidRequest(
            f"resume {entry.interrupt_id!r}: payload is {{'decision': 'allow'|'deny', 'scope': 'once'|'session'|'always'}}"
        )
    return PermissionAnswer(decision, scope)


async def _serve(hub: RunHub, threads: AgUiThreads, request: Request, *, agent: str | None) -> Response:
    body = await _input(request)
    if not body.thread_id or not body.run_id:
        raise InvalidRequest("threadId and runId are required")
    key = f"{agent or ''}\0{body.thread_id}"
    base = f"{request.url.scheme}://{request.url.netloc}"
    last = request.headers.get("last-event-id")
    if last is not None:
        after = _parse_last(last)
        threads.forget(hub)
        seen = threads.by_run_id.get((key, body.run_id))
        if seen is None:
            raise NotFound(f"thread {body.thread_id!r} has no run {body.run_id!r} in this server to read on")
        streamed, segment = seen
        return _response(streamed, segment, base=base, after=after)
    if body.resume:
        streamed_or_none = threads.current.get(key)
        if streamed_or_none is None or streamed_or_none.run.done:
            raise InvalidRequest(f"thread {body.thread_id!r} has no run waiting on an interrupt")
        streamed = streamed_or_none
        answers = [(entry.interrupt_id, _answer(entry)) for entry in body.resume]
        unknown = [i for i, _ in answers if i not in streamed.run.pending]
        if unknown:  # checked before any is answered: a resume is taken whole or not at all
            raise NotFound(f"thread {body.thread_id!r} has no pending interrupt {unknown[0]!r}")
        for interrupt_id, answer in answers:
            hub.answer(streamed.run.id, interrupt_id, answer)
        segment = len(streamed.run_ids)
        streamed.run_ids.append(body.run_id)
        threads.by_run_id[(key, body.run_id)] = (streamed, segment)
        return _response(streamed, segment, base=base)
    prompt = _prompt(body)
    choice = _choice(hub, body, agent)
    async with threads.lock:  # two first POSTs on one thread open one session
        waiting = threads.current.get(key)
        if waiting is not None and not waiting.run.done:
            raise Busy(
                f"thread {body.thread_id!r} is running {waiting.run_ids[-1]!r}; answer its interrupt with resume"
            )
        run = await _start(hub, threads, key, body.thread_id, agent, choice, prompt)
        streamed = ThreadRun(thread_id=body.thread_id, run=run, run_ids=[body.run_id])
        threads.forget(hub)
        threads.current[key] = streamed
        threads.by_run_id[(key, body.run_id)] = (streamed, 0)
    return _response(streamed, 0, base=base)


def _response(streamed: ThreadRun, segment: int, *, base: str, after: tuple[int, int] = (0, -1)) -> Response:
    headers = {
        "cache-control": "no-cache",
        "x-accel-buffering": "no",
        "x-seamline-run-id": streamed.run.id,
        "x-seamline-session-id": streamed.run.session_id or "",
    }
    return StreamingResponse(
        _frames(streamed, segment, base=base, after=after), media_type="text/event-stream", headers=headers
    )


async def _frames(streamed: ThreadRun, segment: int, *, base: str, after: tuple[int, int]) -> AsyncIterator[bytes]:
    """One segment of the run's AG-UI stream: the whole translation is replayed (it is a
    pure function of the events) and only this segment's frames after ``after`` are sent;
    the stream ends at the segment's interrupt or the run's end."""
    run = streamed.run
    translator = AgUiTranslator(
        run.id,
        base_url=base,
        interrupts=True,
        pipeline=run.pipeline,
        first_phase=run.first_phase,
        thread_id=streamed.thread_id,
        run_ids=streamed.run_ids,
        asked=streamed.asked,
    )
    yield b"retry: 1000\n\n"
    async for first, batch in run.follow(0, heartbeat=HEARTBEAT):
        if not batch:
            yield b": keep-alive\n\n"
            continue
        frames: list[bytes] = []
        for index, event in enumerate(batch, first + 1):
            for k, out in enumerate(translator.feed(event)):
                if translator.segment != segment or (index, k) <= after:
                    continue
                frames.append(b"id: %d.%d\ndata: %s\n\n" % (index, k, out.model_dump_json(by_alias=True).encode()))
                if translator.finished:  # this segment's interrupt: the client answers with resume
                    yield b"".join(frames)
                    return
        if frames:
            yield b"".join(frames)
