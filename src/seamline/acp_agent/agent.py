"""seamline as an ACP agent: the methods an ACP client calls, on any seamline provider.

:class:`SeamlineAcpAgent` answers ``initialize``, ``session/new``, ``session/load``,
``session/resume``, ``session/list``, ``session/prompt``, ``session/set_model``,
``session/set_mode``, ``session/close`` and the ``session/cancel`` notification. The
ACP session id is seamline's own session id: a session made here is in the store like
any other (``seamline sessions list`` shows it), and any stored session can be loaded.

A turn runs through :meth:`~seamline.providers.base.ProviderSession.send`, so the raw
log, usage, budget and the settle invariants are the seam's; its events become
``session/update`` notifications (see :mod:`seamline.acp_agent.updates`) and tool calls
that need approval become ``session/request_permission`` (see
:mod:`seamline.acp_agent.permissions`). Mode ``planning`` allows reading tools only.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from seamline.acp_agent.connection import INVALID_REQUEST, AgentConnection
from seamline.acp_agent.permissions import ClientPrompter
from seamline.acp_agent.pipeline_turns import PipelineSession, PipelineSettings
from seamline.acp_agent.updates import (
    RESOURCE_NOT_FOUND,
    UpdateTranslator,
    error_for,
    history_updates,
    prompt_result,
)
from seamline.errors import InvalidRequest, SeamlineError
from seamline.events import Complete, ToolCall, Usage
from seamline.providers.base import Provider, ProviderSession
from seamline.providers.registry import create_provider
from seamline.runner import RunOptions, make_provider
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.rules import PermissionRules
from seamline.tools.approval import ApprovalDecision
from seamline.tools.base import Tool, Toolset, tool_article
from seamline.tools.permissions import PermissionService
from seamline.tools.workspace import Workspace, workspace_tools
from seamline.transport.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, JsonRpcError

__all__ = ["AcpAgentSettings", "SeamlineAcpAgent"]

PROTOCOL_VERSION: Final = 1
MODES: Final = (
    {"id": "agent", "name": "Agent", "description": "tools run after approval"},
    {"id": "planning", "name": "Planning", "description": "reading tools only; nothing is changed"},
)
_PAGE: Final = 50

ToolsFactory = Callable[[Workspace], Toolset]


@dataclass
class AcpAgentSettings:
    """What ``seamline acp`` was started with: the run options every session of this agent
    gets (``run``: the provider by name, as each session builds its own, with its model and
    options; ``yes``, ``max_steps``, ``budget_usd``; the store, open or ``None``), the
    permission rules, how tools are made for a session's folder, and the pipeline, if any."""

    run: RunOptions = field(default_factory=RunOptions)
    rules: PermissionRules | None = None
    tools: ToolsFactory = workspace_tools
    cancel_grace: float = 5.0
    #: with a pipeline, every prompt is one run of it (see :mod:`seamline.acp_agent.pipeline_turns`)
    pipeline: PipelineSettings | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.run.provider, str):
            raise InvalidRequest("seamline acp builds a provider per session: give the provider by name")
        if self.run.store is not None and not isinstance(self.run.store, SessionStore):
            raise InvalidRequest("seamline acp keeps an open store: give store=open_store(...)")

    @property
    def provider(self) -> str:
        return str(self.run.provider)

    @property
    def store(self) -> SessionStore | None:
        return self.run.store if isinstance(self.run.store, SessionStore) else None

    def make_provider(self) -> Provider:
        return make_provider(self.run.provider, model=self.run.model, options=self.run.options)


@dataclass(eq=False)
class ModeApproval:
    """The permission service, with mode ``planning`` refusing every non-reading tool."""

    service: PermissionService
    mode: Literal["agent", "planning"] = "agent"

    async def decide(self, tool: Tool, call: ToolCall) -> ApprovalDecision:
        if self.mode == "planning" and tool.tool_class != "read":
            return ApprovalDecision(
                False, f"{tool.name} is {tool_article(tool.tool_class)} tool; mode planning only reads"
            )
        return await self.service.decide(tool, call)


@dataclass(eq=False)
class OpenSession:
    """A session this agent holds open for its client."""

    provider: Provider
    session: ProviderSession
    translator: UpdateTranslator
    prompter: ClientPrompter
    approval: ModeApproval
    turn: asyncio.Task[dict[str, Any]] | None = None


class SeamlineAcpAgent:
    """The ACP methods; give :meth:`handle` and :meth:`notified` to an :class:`AgentConnection`."""

    def __init__(self, settings: AcpAgentSettings) -> None:
        self.settings = settings
        self.connection: AgentConnection | None = None
        self.sessions: dict[str, OpenSession] = {}
        self.pipelines: dict[str, PipelineSession] = {}
        self._pipeline_turns: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self._grace_timers: set[asyncio.Task[None]] = set()
        self.shutting_down = False

    # -- dispatch ----------------------------------------------------------------------------
    async def handle(self, method: str, params: Any) -> Any:
        p = params if isinstance(params, dict) else {}
        handlers = {
            "initialize": self.initialize,
            "authenticate": self._nothing,
            "session/new": self.new_session,
            "session/load": self.load_session,
            "session/resume": self.resume_session,
            "session/list": self.list_sessions,
            "session/prompt": self.prompt,
            "session/set_model": self.set_model,
            "session/set_mode": self.set_mode,
            "session/close": self.close_session,
        }
        handler = handlers.get(method)
        if handler is None:
            raise JsonRpcError(METHOD_NOT_FOUND, f"method not found: {method}")
        try:
            return await handler(p)
        except SeamlineError as exc:
            if isinstance(exc, JsonRpcError):
                raise
            raise error_for(exc) from None

    async def notified(self, method: str, params: Any) -> None:
        if method == "session/cancel" and isinstance(params, dict):
            await self.cancel(str(params.get("sessionId", "")))

    async def _nothing(self, params: dict[str, Any]) -> dict[str, Any]:
        return {}

    # -- initialize --------------------------------------------------------------------------
    async def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        from seamline._version import __version__

        stored = self.settings.store is not None and self.settings.pipeline is None
        session_caps: dict[str, Any] = {"close": {}}
        if stored:
            session_caps.update({"list": {}, "resume": {}})
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": stored,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": False, "sse": False},
                "sessionCapabilities": session_caps,
            },
            "agentInfo": {"name": "seamline", "title": "seamline", "version": __version__},
            "authMethods": [],
        }

    # -- sessions ----------------------------------------------------------------------------
    def _tools_for(self, cwd: Path) -> tuple[Workspace, Toolset]:
        workspace = Workspace(cwd)
        return workspace, self.settings.tools(workspace)

    def _wrap(self, provider: Provider, session: ProviderSession, approval: ModeApproval) -> OpenSession:
        assert self.connection is not None
        workspace = session.workspace or Path.cwd()
        prompter = ClientPrompter(self.connection, session.session_id, session.tools)
        approval.service.prompter = prompter
        opened = OpenSession(
            provider=provider,
            session=session,
            translator=UpdateTranslator(workspace=workspace, tools=session.tools),
            prompter=prompter,
            approval=approval,
        )
        self.sessions[session.session_id] = opened
        return opened

    def _approval(self, workspace: Workspace) -> ModeApproval:
        service = PermissionService(rules=self.settings.rules, workspace=workspace.root, yes=self.settings.run.yes)
        return ModeApproval(service)

    async def new_session(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = _cwd(params)
        workspace, tools = self._tools_for(cwd)
        if self.settings.pipeline is not None:
            sid = uuid.uuid4().hex
            self.pipelines[sid] = PipelineSession(sid, workspace.root, tools, self.settings.pipeline)
            return {"sessionId": sid}
        provider = self.settings.make_provider()
        approval = self._approval(workspace)
        session = await provider.open(
            workspace=workspace.root,
            store=self.settings.store,
            tools=tools,
            approval=approval,
            metadata={"surface": "acp"},
        )
        self._wrap(provider, session, approval)
        return {"sessionId": session.session_id, **self._session_state(session.session_id)}

    async def load_session(self, params: dict[str, Any]) -> dict[str, Any]:
        opened = await self._reopen(params)
        session = opened.session
        entries = self.settings.store.transcript(session.session_id) if self.settings.store is not None else []
        assert self.connection is not None
        for update in history_updates(entries, workspace=session.workspace or Path.cwd(), tools=session.tools):
            await self.connection.notify("session/update", {"sessionId": session.session_id, "update": update})
        return self._session_state(session.session_id)

    async def resume_session(self, params: dict[str, Any]) -> dict[str, Any]:
        opened = await self._reopen(params)
        return self._session_state(opened.session.session_id)

    async def _reopen(self, params: dict[str, Any]) -> OpenSession:
        session_id = _session_id(params)
        if session_id in self.sessions:
            return self.sessions[session_id]
        store = self.settings.store
        if store is None:
            raise JsonRpcError(RESOURCE_NOT_FOUND, "this agent keeps no store (--no-store): nothing to load")
        record = store.get(session_id)
        if record is None:
            raise JsonRpcError(RESOURCE_NOT_FOUND, f"unknown session {session_id}", {"sessionId": session_id})
        cwd = _cwd(params)
        workspace, tools = self._tools_for(cwd)
        mine = record.provider == self.settings.provider
        provider = create_provider(
            record.provider,
            model=record.metadata.get("model") or record.model,
            options=self.settings.run.options if mine else None,
        )
        approval = self._approval(workspace)
        mode = record.metadata.get("mode", record.mode)
        approval.mode = "planning" if mode == "planning" else "agent"
        session = await provider.resume(session_id, store=store, tools=tools, approval=approval)
        return self._wrap(provider, session, approval)

    def _session_state(self, session_id: str) -> dict[str, Any]:
        opened = self.sessions[session_id]
        model = opened.provider.model or opened.provider.name
        return {
            "modes": {"currentModeId": opened.approval.mode, "availableModes": [dict(m) for m in MODES]},
            "models": {
                "currentModelId": model,
                "availableModels": [{"modelId": model, "name": f"{opened.provider.name}: {model}"}],
            },
        }

    async def list_sessions(self, params: dict[str, Any]) -> dict[str, Any]:
        store = self.settings.store
        if store is None:
            return {"sessions": []}
        cwd = params.get("cwd")
        cursor = params.get("cursor")
        try:
            start = int(cursor) if cursor is not None else 0
        except (TypeError, ValueError):
            raise JsonRpcError(INVALID_PARAMS, f"bad cursor {cursor!r}") from None
        records = store.list_sessions(limit=100_000)
        if isinstance(cwd, str):
            root = str(Path(cwd).resolve())
            records = [r for r in records if r.workspace == root]
        page = records[start : start + _PAGE]
        result: dict[str, Any] = {
            "sessions": [
                {
                    "sessionId": r.id,
                    "cwd": r.workspace or "",
                    "title": r.metadata.get("title") or None,
                    "updatedAt": dt.datetime.fromtimestamp(r.updated_at, dt.UTC).isoformat(),
                    "_meta": {"seamline": {"provider": r.provider, "model": r.model, "status": r.status}},
                }
                for r in page
            ]
        }
        if start + _PAGE < len(records):
            result["nextCursor"] = str(start + _PAGE)
        return result

    async def set_model(self, params: dict[str, Any]) -> dict[str, Any]:
        opened = self._open(params)
        model = params.get("modelId")
        if not isinstance(model, str) or not model.strip():
            raise JsonRpcError(INVALID_PARAMS, "session/set_model needs a modelId")
        opened.provider.model = model
        if self.settings.store is not None:
            self.settings.store.update_metadata(opened.session.session_id, {"model": model})
        return {}

    async def set_mode(self, params: dict[str, Any]) -> dict[str, Any]:
        opened = self._open(params)
        mode = params.get("modeId")
        if mode not in ("agent", "planning"):
            raise JsonRpcError(INVALID_PARAMS, f"unknown mode {mode!r}; the modes are agent and planning")
        opened.approval.mode = "planning" if mode == "planning" else "agent"
        if self.settings.store is not None:
            self.settings.store.update_metadata(opened.session.session_id, {"mode": mode})
        assert self.connection is not None
        await self.connection.notify(
            "session/update",
            {
                "sessionId": opened.session.session_id,
                "update": {"sessionUpdate": "current_mode_update", "currentModeId": mode},
            },
        )
        return {}

    async def close_session(self, params: dict[str, Any]) -> dict[str, Any]:
        pipeline = self.pipelines.pop(_session_id(params), None)
        if pipeline is not None:
            running = self._pipeline_turns.pop(pipeline.session_id, None)
            if running is not None and not running.done():
                await pipeline.cancel()
                await self._hard_cancel(running)
            return {}
        opened = self._open(params)
        await self._close(opened)
        return {}

    def _open(self, params: dict[str, Any]) -> OpenSession:
        session_id = _session_id(params)
        opened = self.sessions.get(session_id)
        if session_id in self.pipelines:
            raise JsonRpcError(INVALID_PARAMS, "a pipeline session has no model or mode of its own")
        if opened is None:
            stored = self.settings.store is not None and self.settings.store.get(session_id) is not None
            hint = "; load or resume it first" if stored else ""
            raise JsonRpcError(RESOURCE_NOT_FOUND, f"unknown session {session_id}{hint}", {"sessionId": session_id})
        return opened

    # -- the turn ----------------------------------------------------------------------------
    async def prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        if _session_id(params) in self.pipelines:
            return await self._pipeline_prompt(params)
        opened = self._open(params)
        if self.shutting_down:
            raise JsonRpcError(INVALID_REQUEST, "the agent is shutting down (its input closed)")
        if opened.turn is not None and not opened.turn.done():
            raise JsonRpcError(INVALID_REQUEST, "a prompt is already running in this session")
        text = prompt_text(params.get("prompt"))
        if not text.strip():
            raise JsonRpcError(INVALID_PARAMS, "the prompt has no text")
        task = asyncio.create_task(self._turn(opened, text))
        opened.turn = task
        return await _settled(task)

    async def _pipeline_prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        pipeline = self.pipelines[_session_id(params)]
        running = self._pipeline_turns.get(pipeline.session_id)
        if self.shutting_down or (running is not None and not running.done()):
            raise JsonRpcError(
                INVALID_REQUEST, "a prompt is already running in this session (or the agent is stopping)"
            )
        text = prompt_text(params.get("prompt"))
        if not text.strip():
            raise JsonRpcError(INVALID_PARAMS, "the prompt has no text")
        connection = self.connection
        assert connection is not None

        async def notify(update: dict[str, Any]) -> None:
            await connection.notify("session/update", {"sessionId": pipeline.session_id, "update": update})

        task = asyncio.create_task(pipeline.run(text, notify))
        self._pipeline_turns[pipeline.session_id] = task
        return await _settled(task)

    async def _turn(self, opened: OpenSession, text: str) -> dict[str, Any]:
        session = opened.session
        store = self.settings.store
        if store is not None:
            record = store.get(session.session_id)
            if record is not None and not record.metadata.get("title"):
                store.update_metadata(session.session_id, {"title": text.strip().splitlines()[0][:80]})
        translator = opened.translator
        translator.begin_turn()
        usages: list[Usage] = []
        final: Complete | None = None
        assert self.connection is not None
        run = self.settings.run
        async for event in session.send(text, max_steps=run.max_steps, budget_usd=run.budget_usd):
            for update in translator.updates(event):
                await self.connection.notify("session/update", {"sessionId": session.session_id, "update": update})
            if isinstance(event, Usage):
                usages.append(event)
            elif isinstance(event, Complete):
                final = event
        assert final is not None  # the seam ends every turn with one complete
        return prompt_result(final, usages, error=translator.last_error)

    async def cancel(self, session_id: str) -> None:
        pipeline = self.pipelines.get(session_id)
        running = self._pipeline_turns.get(session_id)
        if pipeline is not None and running is not None and not running.done():
            await pipeline.cancel()
            self._start_grace(running)
            return
        opened = self.sessions.get(session_id)
        if opened is None or opened.turn is None or opened.turn.done():
            return
        opened.prompter.cancel_all()
        with contextlib.suppress(SeamlineError):
            await opened.provider.abort(opened.session)
        self._start_grace(opened.turn)

    def _start_grace(self, turn: asyncio.Task[dict[str, Any]]) -> None:
        timer = asyncio.create_task(self._hard_cancel(turn))
        self._grace_timers.add(timer)
        timer.add_done_callback(self._grace_timers.discard)

    async def _hard_cancel(self, turn: asyncio.Task[dict[str, Any]]) -> None:
        """A provider that does not settle a cancelled turn in time is cancelled outright."""
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(turn), timeout=self.settings.cancel_grace)
        if not turn.done():
            turn.cancel()

    # -- shutdown ----------------------------------------------------------------------------
    async def shut_down(self) -> None:
        """No new turns; the running ones are cancelled (their prompts answer ``cancelled``)."""
        self.shutting_down = True
        for session_id in [*self.sessions, *self.pipelines]:
            await self.cancel(session_id)

    async def _close(self, opened: OpenSession) -> None:
        self.sessions.pop(opened.session.session_id, None)
        if opened.turn is not None and not opened.turn.done():
            opened.prompter.cancel_all()
            with contextlib.suppress(SeamlineError):
                await opened.provider.abort(opened.session)
            await self._hard_cancel(opened.turn)
            with contextlib.suppress(BaseException):
                await opened.turn
        with contextlib.suppress(SeamlineError):
            await opened.provider.close(opened.session)

    async def close_all(self) -> None:
        for opened in list(self.sessions.values()):
            await self._close(opened)
        for session_id, running in list(self._pipeline_turns.items()):
            if not running.done():
                await self.pipelines[session_id].cancel()
                await self._hard_cancel(running)
                with contextlib.suppress(BaseException):
                    await running
        for timer in list(self._grace_timers):
            timer.cancel()


async def _settled(task: asyncio.Task[dict[str, Any]]) -> dict[str, Any]:
    """The turn's result; ``cancelled`` when it had to be stopped outright."""
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    if task.cancelled():  # cancelled, and it did not settle within the grace period
        return {"stopReason": "cancelled", "_meta": {"seamline": {"outcome": "aborted", "stopReason": "cancelled"}}}
    return task.result()


def _session_id(params: dict[str, Any]) -> str:
    value = params.get("sessionId")
    if not isinstance(value, str) or not value:
        raise JsonRpcError(INVALID_PARAMS, "sessionId is required")
    return value


def _cwd(params: dict[str, Any]) -> Path:
    cwd = params.get("cwd")
    if not isinstance(cwd, str) or not cwd:
        raise JsonRpcError(INVALID_PARAMS, "cwd is required (an absolute path)")
    path = Path(cwd)
    if not path.is_absolute():
        raise JsonRpcError(INVALID_PARAMS, f"cwd must be an absolute path, got {cwd!r}")
    if not path.is_dir():
        raise InvalidRequest(f"cwd {cwd} is not a folder")
    return path


def prompt_text(blocks: Any) -> str:
    """The prompt's content blocks as one text: text blocks, embedded text resources and
    resource links (by their URI); images and audio are refused (not offered)."""
    if not isinstance(blocks, list):
        raise JsonRpcError(INVALID_PARAMS, "prompt must be a list of content blocks")
    parts: list[str] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            resource = block["resource"]
            if isinstance(resource.get("text"), str):
                parts.append(f"\n<resource uri={resource.get('uri', '')!s}>\n{resource['text']}\n</resource>")
        elif kind == "resource_link" and isinstance(block.get("uri"), str):
            parts.append(f"[{block.get('name') or block['uri']}]({block['uri']})")
        else:
            raise JsonRpcError(INVALID_PARAMS, f"content block {kind!r} is not supported (text and resources only)")
    return "\n".join(p for p in parts if p) if len(parts) > 1 else (parts[0] if parts else "")
