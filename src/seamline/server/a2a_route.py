"""``seamline serve`` as an A2A (Agent2Agent) server: one agent card and one JSON-RPC
endpoint per declared agent (``--agents FILE``).

An A2A client is pointed at ``http://HOST:PORT/v1/agents/NAME/a2a``: it reads the card at
``/v1/agents/NAME/a2a/.well-known/agent-card.json`` (the path the official SDK resolves
from a base URL) and posts JSON-RPC 2.0 to the interface URL the card names. One card per
agent, not one card with a skill per agent, because an A2A client picks its agent by card
and has no way to name a skill in a message.

Methods (A2A 1.0 names, the ones the pinned SDK's client sends): ``SendMessage``,
``SendStreamingMessage`` (SSE), ``GetTask``, ``ListTasks``, ``CancelTask``,
``SubscribeToTask``. A
message without a task starts a run: on a new session of the agent, or, with a
``contextId``, on the session that context names (a session id, or a context id the client
chose, kept in the session's metadata ``a2a_context_id``). A message with the ``taskId`` of
a task in ``input-required`` answers its pending permission request (text ``allow`` /
``deny``, or a data part ``{"decision", "scope", "request_id"}``) and goes on with that
task. Runs started here are ordinary serve runs: in the store, in ``GET /v1/runs``, in
``seamline watch``. See :mod:`seamline.server.a2a_tasks` for the mapping of states.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from seamline.errors import InvalidRequest, SeamlineError
from seamline.server.a2a_tasks import ANSWER_PROMPT, PipelineTasks, TaskTranslator, asked_before, task_of, waiting
from seamline.server.a2a_v03 import LEGACY_METHODS, legacy_params, legacy_result
from seamline.server.a2a_wire import (
    PROTOCOL_VERSION,
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    CancelParams,
    ListParams,
    Message,
    RpcError,
    RpcRequest,
    SendConfiguration,
    SendParams,
    StreamResponse,
    TaskList,
    TaskParams,
    TaskState,
)
from seamline.server.access import refusal
from seamline.server.agents_file import AGENT_KEY
from seamline.server.operations import Reply, operation
from seamline.server.runs import Busy, NotFound, Run, RunHub
from seamline.server.state import run_hub, serve_settings, state_value
from seamline.server.users import ACTING
from seamline.tools.permissions import PermissionAnswer

__all__ = ["CONTEXT_KEY", "a2a_card", "a2a_root_card", "a2a_rpc"]

CONTEXT_KEY: Final = "a2a_context_id"  # a client's own context id, kept on its session
# A keep-alive comment on a quiet stream this often: the SDK's client, on its own HTTP client
# (httpx's defaults), gives up after 5 s without a byte.
HEARTBEAT: Final = 3.0
_PAGE: Final = 50  # ListTasks' page size unless the client asks for another
_MOST_PAGE: Final = 100
_SCAN: Final = 10_000  # stored sessions looked through for a client's context id
_TASK_NOT_FOUND: Final = -32001
_NOT_CANCELABLE: Final = -32002
_NO_PUSH: Final = -32003
_UNSUPPORTED: Final = -32004
_NO_EXTENDED_CARD: Final = -32007
_VERSION: Final = -32009
_INVALID_REQUEST: Final = -32600
_NO_METHOD: Final = -32601
_INVALID_PARAMS: Final = -32602
_INTERNAL: Final = -32603
_PARSE: Final = -32700
_ALLOW: Final = frozenset({"allow", "allowed", "yes", "y", "approve", "approved", "ok"})
_DENY: Final = frozenset({"deny", "denied", "no", "n", "reject", "rejected"})
_MODES: Final = ["text/plain", "application/json"]
_encoder: Final = msgspec.json.Encoder()
LEGACY_VERSION: Final = "0.3"


class RpcCall(msgspec.Struct):
    """A JSON-RPC 2.0 request, as the document describes it (``id``: a string or a number)."""

    jsonrpc: str
    method: str
    params: dict[str, Any]
    id: str | None = None


class RpcReplyShape(msgspec.Struct, omit_defaults=True):
    """A JSON-RPC 2.0 reply, as the document describes it."""

    jsonrpc: str
    id: str | None
    result: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    error: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET


class RpcReply(msgspec.Struct, omit_defaults=True):
    """A JSON-RPC 2.0 reply: ``result`` (a Task, or ``{"task": …}`` for SendMessage) or
    ``error`` (``{code, message}``)."""

    jsonrpc: str
    id: str | int | None
    result: Any = msgspec.UNSET
    error: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET


def _base(request: Request) -> str:
    return f"{request.url.scheme}://{request.url.netloc}"


@operation(
    "the A2A agent card of the declared agent NAME (one JSON-RPC interface, streaming)",
    replies={200: Reply("the agent card (A2A 1.0)", AgentCard)},
    errors=(404,),
)
async def a2a_card(request: Request) -> Response:
    return _card(request, request.path_params["name"])


@operation(
    "the A2A agent card at the well-known path of the server: its one declared agent's "
    "(with none or several, 404 names where each agent's card is)",
    replies={200: Reply("the agent card (A2A 1.0)", AgentCard)},
    errors=(404,),
)
async def a2a_root_card(request: Request) -> Response:
    names = list(run_hub(request).policy.agents)
    if len(names) == 1:
        return _card(request, names[0])
    where = ", ".join(f"/v1/agents/{n}/a2a/.well-known/agent-card.json" for n in names)
    if not names:
        raise NotFound("this server declares no agent (seamline serve --agents FILE): it has no A2A agent card")
    raise NotFound(f"this server declares {len(names)} agents, each an A2A agent with its own card: {where}")


def _card(request: Request, name: str) -> Response:
    from seamline._version import __version__

    spec = run_hub(request).policy.require_agent(name)
    url = f"{_base(request)}/v1/agents/{spec.name}/a2a"
    described = spec.description or f"seamline agent {spec.name} ({spec.provider})"
    card = AgentCard(
        name=spec.name,
        description=described,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=LEGACY_VERSION),
        ],
        url=url,
        preferred_transport="JSONRPC",
        protocol_version=f"{LEGACY_VERSION}.0",
        version=__version__,
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extended_agent_card=False),
        default_input_modes=list(_MODES),
        default_output_modes=list(_MODES),
        skills=[AgentSkill(id=spec.name, name=spec.name, description=described, tags=[spec.provider, "seamline"])],
        provider=AgentProvider(organization="seamline", url=_base(request)),
    )
    if serve_settings(request).auth:
        card.security_schemes = {"bearer": {"type": "http", "scheme": "bearer"}}
        card.security = [{"bearer": []}]
    return Response(_encoder.encode(card), media_type="application/json")


@operation(
    "A2A JSON-RPC for the declared agent NAME: SendMessage, SendStreamingMessage (SSE), GetTask, "
    "ListTasks, CancelTask, SubscribeToTask",
    replies={
        200: Reply(
            "a JSON-RPC reply, or for the streaming methods an SSE stream of them",
            RpcReplyShape,
            media=("application/json", "text/event-stream"),
        )
    },
    body=RpcCall,
    errors=(404, 413),
)
async def a2a_rpc(request: Request) -> Response:
    hub = run_hub(request)
    agent = hub.policy.require_agent(request.path_params["name"]).name  # 404 before the body
    raw = await request.body()
    try:
        call = msgspec.json.decode(raw or b"{}", type=RpcRequest)
    except msgspec.DecodeError as exc:
        code = _INVALID_REQUEST if isinstance(exc, msgspec.ValidationError) else _PARSE
        return _error_reply(None, RpcError(code, f"not a JSON-RPC 2.0 request: {exc}"))
    if call.jsonrpc != "2.0" or not call.method:
        return _error_reply(
            call.id, RpcError(_INVALID_REQUEST, "a JSON-RPC 2.0 request has jsonrpc '2.0' and a method")
        )
    legacy = call.method in LEGACY_METHODS
    served = LEGACY_VERSION if legacy else PROTOCOL_VERSION
    version = request.headers.get("a2a-version", served).strip()
    if version.split(".")[:2] != served.split("."):
        message = f"A2A-Version {version[:20]!r} is not served here; {call.method} is A2A {served}"
        return _error_reply(call.id, RpcError(_VERSION, message))
    if legacy:
        try:
            given = msgspec.json.decode(call.params)
        except msgspec.DecodeError:  # pragma: no cover - the request decoded whole
            given = None
        params = msgspec.Raw(_encoder.encode(legacy_params(call.method, given)))
        call = RpcRequest(jsonrpc="2.0", method=LEGACY_METHODS[call.method], id=call.id, params=params)
    try:
        handler = _METHODS.get(call.method)
        if handler is None:
            raise RpcError(_NO_METHOD, _unknown_method(call.method))
        pipelines = state_value(request.app.state, "a2a_pipelines", PipelineTasks)
        return await handler(_Call(hub, agent, call, _base(request), pipelines, legacy=legacy))
    except RpcError as exc:
        return _error_reply(call.id, exc)
    except _Refused as exc:
        return exc.reply


class _Refused(Exception):
    """A user may not act on this task (another operator's run): HTTP 403, as elsewhere."""

    def __init__(self, reply: Response) -> None:
        self.reply = reply


class _Call:
    """One JSON-RPC call to one agent."""

    def __init__(
        self, hub: RunHub, agent: str, call: RpcRequest, base: str, pipelines: PipelineTasks, *, legacy: bool = False
    ) -> None:
        self.legacy = legacy  # an A2A 0.3 call: its results go back in 0.3's shapes
        self.hub = hub
        self.agent = agent
        self.call = call
        self.base = base
        self.pipelines = pipelines
        # An A2A client cannot ask for yes; an agent the operator declared with yes = true has it.
        self.yes = hub.policy.require_agent(agent).yes

    def params(self, kind: type[Any]) -> Any:
        try:
            return msgspec.json.decode(self.call.params, type=kind)
        except msgspec.DecodeError as exc:
            raise RpcError(_INVALID_PARAMS, f"invalid params for {self.call.method}: {exc}") from None

    def _result(self, result: Any) -> Any:
        return legacy_result(msgspec.to_builtins(result)) if self.legacy else result

    def reply(self, result: Any) -> Response:
        body = _encoder.encode(RpcReply(jsonrpc="2.0", id=self.call.id, result=self._result(result)))
        return Response(body, media_type="application/json")

    def frame(self, result: StreamResponse) -> bytes:
        reply = RpcReply(jsonrpc="2.0", id=self.call.id, result=self._result(result))
        return b"data: %s\n\n" % _encoder.encode(reply)

    # -- tasks and contexts ----------------------------------------------------------------
    def run(self, task_id: str) -> tuple[Run, str]:
        """The run a task id names, if it is one of this agent's, and its context id."""
        run = self.hub.runs.get(task_id)
        if run is None:
            raise RpcError(_TASK_NOT_FOUND, f"no task {task_id!r} in this server")
        if run.session_id is None:  # a pipeline run
            agent, context_id = self.pipelines.runs.get(run.id, ("", ""))
            if agent != self.agent:
                raise RpcError(_TASK_NOT_FOUND, f"no task {task_id!r} for agent {self.agent!r}")
            return run, context_id
        record = self.hub.store.get(run.session_id)
        if record is None or record.metadata.get(AGENT_KEY) != self.agent:
            raise RpcError(_TASK_NOT_FOUND, f"no task {task_id!r} for agent {self.agent!r}")
        return run, str(record.metadata.get(CONTEXT_KEY) or run.session_id)

    def own(self, run: Run) -> None:
        """Only its starter (or an admin) cancels a task or answers its requests."""
        user = ACTING.get()
        if user is None:
            return
        refused = refusal(user, "own", {"run_id": run.id}, self.hub)
        if refused is not None:
            error = {"kind": "permission", "message": refused.message, "role": refused.needed}
            raise _Refused(JSONResponse({"error": error}, status_code=403))

    async def session_for(self, context_id: str | None) -> tuple[str, str]:
        """The session a message's context names (opened when new) and the context id."""
        if context_id:
            record = self.hub.store.get(context_id)
            if record is not None and record.metadata.get(AGENT_KEY) == self.agent:
                return record.id, context_id
            for found in self.hub.store.list_sessions(limit=_SCAN):
                if found.metadata.get(CONTEXT_KEY) == context_id and found.metadata.get(AGENT_KEY) == self.agent:
                    return found.id, context_id
        metadata = {CONTEXT_KEY: context_id} if context_id else {}
        slot = await self.hub.open_session(agent=self.agent, metadata=metadata, yes=self.yes)
        session_id = slot.session.session_id
        return session_id, context_id or session_id

    async def start(self, params: SendParams) -> tuple[Run, str, int]:
        """The run a message starts or goes on with, its context id, and the number of its
        events the client has been told of already."""
        config = params.configuration if isinstance(params.configuration, SendConfiguration) else None
        if config is not None and isinstance(config.task_push_notification_config, dict):
            raise RpcError(_NO_PUSH, "this server sends no push notifications; stream or poll the task")
        message = params.message
        if isinstance(message.task_id, str) and message.task_id:
            run, context_id = self.run(message.task_id)
            self.own(run)
            return run, context_id, self.answer(run, message)
        text = _text(message)
        if not text.strip():
            raise RpcError(_INVALID_PARAMS, "the message has no text to run (a text part)")
        context = message.context_id if isinstance(message.context_id, str) else None
        pipeline = _pipeline(params)
        try:
            if pipeline is not None:
                run = await self.hub.start_pipeline(pipeline, text, agent=self.agent, yes=self.yes)
                context_id = context or run.id
                self.pipelines.add(run.id, self.agent, context_id, self.hub.runs)
                return run, context_id, 0
            session_id, context_id = await self.session_for(context)
            run = await self.hub.start_run(session_id, text, yes=self.yes)
        except Busy as exc:
            raise RpcError(_UNSUPPORTED, f"{exc.message} (answer or cancel its task first)") from None
        except InvalidRequest as exc:  # a context or pipeline this server does not know, too
            raise RpcError(_INVALID_PARAMS, exc.message) from None
        except SeamlineError as exc:
            raise RpcError(_INTERNAL, f"{exc.kind}: {exc.message}") from None
        return run, context_id, 0

    def answer(self, run: Run, message: Message) -> int:
        """Answer the run's pending permission request with the message's decision."""
        if run.done:
            raise RpcError(
                _UNSUPPORTED,
                f"task {run.id} is over ({run.status}); send a new message with its contextId to go on",
            )
        pending = waiting(run)
        if not pending:
            raise RpcError(_UNSUPPORTED, f"task {run.id} is working and waits for no input")
        told = len(run.events)
        decision, scope, request_id = _decision(message)
        chosen = next((r for r in pending if r.request_id == request_id), None) if request_id else pending[0]
        if chosen is None:
            raise RpcError(_INVALID_PARAMS, f"task {run.id} waits on no permission request {request_id!r}")
        try:
            self.hub.answer(run.id, chosen.request_id, PermissionAnswer(decision, scope))
        except NotFound as exc:
            raise RpcError(_INVALID_PARAMS, exc.message) from None
        return told


def _pipeline(params: SendParams) -> str | None:
    """The built-in pipeline a message asks for: ``metadata.seamline.pipeline`` of the
    request or of its message (the declared agent plays its agent roles)."""
    for metadata in (params.metadata, params.message.metadata):
        given = metadata.get("seamline") if isinstance(metadata, dict) else None
        if given is None:
            continue
        if not isinstance(given, dict) or set(given) != {"pipeline"} or not isinstance(given["pipeline"], str):
            raise RpcError(
                _INVALID_PARAMS, 'metadata.seamline takes only {"pipeline": NAME}: the agent is the operator\'s'
            )
        return str(given["pipeline"])
    return None


def _text(message: Message) -> str:
    return "\n".join(part.text for part in message.parts if isinstance(part.text, str))


def _decision(message: Message) -> tuple[Any, Any, str | None]:
    for part in message.parts:
        data = part.data
        if isinstance(data, dict) and "decision" in data:
            decision, scope = data.get("decision"), data.get("scope", "once")
            request_id = data.get("request_id", data.get("requestId"))
            if decision in ("allow", "deny") and scope in ("once", "session", "always"):
                return decision, scope, request_id if isinstance(request_id, str) else None
            raise RpcError(_INVALID_PARAMS, f"the task waits for a permission answer: {ANSWER_PROMPT}")
    words = _text(message).strip().lower().split()
    first = words[0].strip(".!,") if words else ""
    if first in _ALLOW:
        return "allow", "once", None
    if first in _DENY:
        return "deny", "once", None
    raise RpcError(_INVALID_PARAMS, f"the task waits for a permission answer: {ANSWER_PROMPT}")


def _error_reply(call_id: str | int | None, error: RpcError) -> Response:
    reply = RpcReply(jsonrpc="2.0", id=call_id, error={"code": error.code, "message": error.message})
    return Response(_encoder.encode(reply), media_type="application/json")


def _unknown_method(method: str) -> str:
    return f"no method {method!r} (A2A 1.0's, or 0.3's message/send, message/stream, tasks/get, tasks/cancel)"


async def _settled(run: Run, context_id: str, after: int) -> None:
    """Wait until the run is over or stops for input, reading its events after ``after``."""
    if asked_before(run, after) is not None:
        return
    translator = TaskTranslator.reading_from(run, context_id, after)
    async for first, batch in run.follow(after):
        for number, event in enumerate(batch, first + 1):
            translator.feed(event, number)
            if translator.finished:
                return


def _history(length: int | msgspec.UnsetType) -> int | None:
    if not isinstance(length, int):
        return None
    if length < 0:
        raise RpcError(_INVALID_PARAMS, "historyLength is 0 or more")
    return length


async def _send(call: _Call) -> Response:
    params: SendParams = call.params(SendParams)
    run, context_id, told = await call.start(params)
    config = params.configuration if isinstance(params.configuration, SendConfiguration) else None
    if config is None or not config.return_immediately:
        await _settled(run, context_id, told)
    history = _history(config.history_length) if config is not None else None
    return call.reply({"task": task_of(run, context_id, history_length=history)})


async def _stream(call: _Call) -> Response:
    params: SendParams = call.params(SendParams)
    run, context_id, told = await call.start(params)
    return _sse(call, run, context_id, told, "TASK_STATE_WORKING" if told else "TASK_STATE_SUBMITTED")


async def _subscribe(call: _Call) -> Response:
    params: TaskParams = call.params(TaskParams)
    run, context_id = call.run(params.id)
    if run.done:
        raise RpcError(_UNSUPPORTED, f"task {run.id} is over ({run.status}); read it with GetTask")
    return _sse(call, run, context_id, len(run.events), None)


def _sse(call: _Call, run: Run, context_id: str, after: int, state: TaskState | None) -> Response:
    headers = {"cache-control": "no-cache", "x-accel-buffering": "no", "x-seamline-run-id": run.id}
    frames = _frames(call, run, context_id, after, state)
    return StreamingResponse(frames, media_type="text/event-stream", headers=headers)


async def _frames(call: _Call, run: Run, context_id: str, after: int, state: TaskState | None) -> AsyncIterator[bytes]:
    """The task first (as it was at ``state``, or as it is now), then its updates from
    event ``after`` on, until it is over or stops for input."""
    yield call.frame(StreamResponse(task=task_of(run, context_id, state=state)))
    translator = TaskTranslator.reading_from(run, context_id, after)
    earlier = asked_before(run, after)
    if earlier is not None:
        yield call.frame(translator.ask(earlier))
        return
    async for first, batch in run.follow(after, heartbeat=HEARTBEAT):
        if not batch:
            yield b": keep-alive\n\n"
            continue
        frames = [
            call.frame(out) for number, event in enumerate(batch, first + 1) for out in translator.feed(event, number)
        ]
        if frames:
            yield b"".join(frames)
        if translator.finished:
            return


async def _get(call: _Call) -> Response:
    params: TaskParams = call.params(TaskParams)
    run, context_id = call.run(params.id)
    return call.reply(task_of(run, context_id, history_length=_history(params.history_length)))


async def _cancel(call: _Call) -> Response:
    params: CancelParams = call.params(CancelParams)
    run, context_id = call.run(params.id)
    call.own(run)
    if run.done:
        raise RpcError(_NOT_CANCELABLE, f"task {run.id} is over ({run.status})")
    await call.hub.cancel(run.id)
    # The run ends aborted within the hub's grace period (then its task is cut).
    try:
        async with asyncio.timeout(call.hub.cancel_grace + 10.0):
            async for _ in run.follow(len(run.events)):
                pass
    except TimeoutError:
        pass
    return call.reply(task_of(run, context_id))


async def _list(call: _Call) -> Response:
    params: ListParams = call.params(ListParams)
    size = params.page_size if isinstance(params.page_size, int) else _PAGE
    if not 1 <= size <= _MOST_PAGE:
        raise RpcError(_INVALID_PARAMS, f"pageSize is 1 to {_MOST_PAGE}")
    try:
        offset = int(params.page_token or "0")
    except ValueError:
        offset = -1
    if offset < 0:
        raise RpcError(_INVALID_PARAMS, "pageToken is one this server gave")
    history = _history(params.history_length)
    tasks = []
    for run in reversed(list(call.hub.runs.values())):  # the newest first
        try:
            _, context_id = call.run(run.id)
        except RpcError:
            continue  # another agent's run, or one no A2A client can name
        if params.context_id and context_id != params.context_id:
            continue
        task = task_of(run, context_id, history_length=history)
        if params.status and task.status.state != params.status:
            continue
        if not params.include_artifacts:
            task.artifacts = []
        tasks.append(task)
    page = tasks[offset : offset + size]
    following = str(offset + size) if offset + size < len(tasks) else ""
    return call.reply(TaskList(tasks=page, next_page_token=following, page_size=size, total_size=len(tasks)))


async def _unsupported(call: _Call) -> Response:
    if "PushNotification" in call.call.method:
        raise RpcError(_NO_PUSH, "this server sends no push notifications; stream or poll the task")
    if call.call.method == "GetExtendedAgentCard":
        raise RpcError(_NO_EXTENDED_CARD, "this server has no extended agent card")
    raise RpcError(_UNSUPPORTED, f"{call.call.method} is not supported here")


_METHODS: Final[dict[str, Callable[[_Call], Awaitable[Response]]]] = {
    "SendMessage": _send,
    "SendStreamingMessage": _stream,
    "GetTask": _get,
    "CancelTask": _cancel,
    "SubscribeToTask": _subscribe,
    "ListTasks": _list,
    "GetExtendedAgentCard": _unsupported,
    "CreateTaskPushNotificationConfig": _unsupported,
    "GetTaskPushNotificationConfig": _unsupported,
    "ListTaskPushNotificationConfigs": _unsupported,
    "DeleteTaskPushNotificationConfig": _unsupported,
}
