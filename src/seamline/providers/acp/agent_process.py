"""The shared half of the ACP provider: one agent process serving several sessions.

An :class:`AcpAgent` is a long-lived subprocess speaking the Agent Client Protocol
(JSON-RPC 2.0, one message per line on stdio). It is started and ``initialize``-d once per
command line (and event loop), shared by every session opened with that command, and
shut down when the last session closes (reference counted).

Messages for a session are routed to its :class:`AcpChannel`: ``session/update``
notifications into a queue the running turn reads, ``session/request_permission`` to the
channel's permission callback, and the client file-system methods
(``fs/read_text_file``, ``fs/write_text_file``) answered under the envelope's rules
(:mod:`seamline.sandbox.confined_files`): beneath the session's workspace, no link
followed, ``.git`` read-only. Every line the agent's stdout carries is untrusted: whatever
runs inside the agent's sandbox may have written it (see docs/sandbox.md, "The trust
rule"), so it can do no more here than the agent could do itself.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from seamline.events import Event, FileChange
from seamline.sandbox.confined_files import ConfinedPathRefused, read_text_beneath, write_text_beneath
from seamline.transport.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, JsonRpcError, JsonRpcProcess
from seamline.transport.pool import SharedProcessPool

__all__ = [
    "PROTOCOL_VERSION",
    "AcpAgent",
    "AcpChannel",
    "acquire_agent",
    "merge_tool_call",
    "release_agent",
    "running_agents",
    "tool_arguments",
    "tool_name",
]

PROTOCOL_VERSION: Final = 1
CLIENT_INFO: Final = {"name": "seamline", "title": "seamline", "version": "0.1.0"}

PermissionCallback = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
RawSink = Callable[[str, dict[str, Any]], None]


@dataclass(eq=False)
class AcpChannel:
    """What the agent process routes to one session."""

    wire_id: str
    workspace: Path
    updates: asyncio.Queue[dict[str, Any] | list[Event]] = field(default_factory=asyncio.Queue)
    #: answers ``session/request_permission`` while a turn runs (None: refuse)
    permission: PermissionCallback | None = None
    #: raw-log sink for this session's native messages
    raw: RawSink | None = None
    #: answered permission requests still open when a cancel comes
    open_permissions: set[asyncio.Future[dict[str, Any]]] = field(default_factory=set)
    #: what the agent said of each tool call so far, merged as the updates arrive (before the
    #: turn translates them), so that a permission request can name the call right away
    tool_calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    first_titles: dict[str, str] = field(default_factory=dict)

    def note_tool_call(self, update: dict[str, Any]) -> None:
        call_id = update.get("toolCallId")
        if not isinstance(call_id, str) or update.get("sessionUpdate") not in ("tool_call", "tool_call_update"):
            return
        if update.get("sessionUpdate") == "tool_call" and isinstance(update.get("title"), str):
            self.first_titles.setdefault(call_id, update["title"])
        merge_tool_call(self.tool_calls.setdefault(call_id, {}), update)


class AcpAgent:
    """One ACP agent subprocess, initialized, with its sessions' channels."""

    def __init__(self, key: tuple[Any, ...], argv: Sequence[str]) -> None:
        self.key = key
        self.argv = tuple(argv)
        self.rpc: JsonRpcProcess | None = None
        self.capabilities: dict[str, Any] = {}
        self.agent_info: dict[str, Any] = {}
        self.protocol_version: int = PROTOCOL_VERSION
        self.channels: dict[str, AcpChannel] = {}
        self.refs = 0
        #: the auth methods ``initialize`` listed; ``authenticate`` is sent when a session asks
        self.auth_methods: list[dict[str, Any]] = []
        self.authenticated = False
        #: the variables seamline set or unset for the agent over its own (the gateway's URL
        #: and placeholder), which ``authenticate`` passes in place of the environment's
        self.key_layer: dict[str, str | None] = {}

    # -- start ------------------------------------------------------------------------------
    async def start(self, *, env: Mapping[str, str], cwd: Path, timeout: float) -> None:
        self.rpc = await JsonRpcProcess.spawn(
            self.argv,
            env=env,
            cwd=cwd,
            on_request=self._on_request,
            on_notification=self._on_notification,
            observer=self._observe,
        )
        try:
            result = await self.rpc.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False},
                    "clientInfo": CLIENT_INFO,
                },
                timeout=timeout,
            )
        except BaseException:
            await self.rpc.close(grace=1.0)
            raise
        result = result if isinstance(result, dict) else {}
        caps = result.get("agentCapabilities")
        self.capabilities = caps if isinstance(caps, dict) else {}
        info = result.get("agentInfo")
        self.agent_info = info if isinstance(info, dict) else {}
        methods = result.get("authMethods")
        self.auth_methods = [m for m in methods if isinstance(m, dict)] if isinstance(methods, list) else []
        version = result.get("protocolVersion")
        self.protocol_version = version if isinstance(version, int) else PROTOCOL_VERSION

    @property
    def alive(self) -> bool:
        return self.rpc is not None and self.rpc.alive

    def session_capability(self, name: str) -> bool:
        """Whether ``agentCapabilities.sessionCapabilities`` offers ``name`` (fork, resume, close…)."""
        caps = self.capabilities.get("sessionCapabilities")
        return isinstance(caps, dict) and caps.get(name) is not None

    @property
    def can_load(self) -> bool:
        return bool(self.capabilities.get("loadSession"))

    async def request(self, method: str, params: Any, *, timeout: float) -> Any:
        assert self.rpc is not None
        return await self.rpc.request(method, params, timeout=timeout)

    async def notify(self, method: str, params: Any) -> None:
        assert self.rpc is not None
        await self.rpc.notify(method, params)

    # -- routing ------------------------------------------------------------------------------
    def _observe(self, direction: str, message: dict[str, Any]) -> None:
        params = message.get("params")
        wire_id = params.get("sessionId") if isinstance(params, dict) else None
        channel = self.channels.get(wire_id) if isinstance(wire_id, str) else None
        if channel is not None and channel.raw is not None:
            channel.raw(direction, message)

    def _on_notification(self, method: str, params: Any) -> None:
        if method != "session/update" or not isinstance(params, dict):
            return  # an extension notification (``_…``) or one we do not know: nothing to do
        channel = self.channels.get(str(params.get("sessionId")))
        update = params.get("update")
        if channel is not None and isinstance(update, dict):
            channel.note_tool_call(update)
            channel.updates.put_nowait(update)

    async def _on_request(self, method: str, params: Any) -> Any:
        params = params if isinstance(params, dict) else {}
        channel = self.channels.get(str(params.get("sessionId")))
        if method == "session/request_permission":
            if channel is None or channel.permission is None:
                return {"outcome": {"outcome": "cancelled"}}
            answer: asyncio.Future[dict[str, Any]] = asyncio.ensure_future(channel.permission(params))
            channel.open_permissions.add(answer)
            try:
                return await answer
            except asyncio.CancelledError:
                return {"outcome": {"outcome": "cancelled"}}
            finally:
                channel.open_permissions.discard(answer)
        if method == "fs/read_text_file":
            channel = _known(channel)
            try:
                text, path = read_text_beneath(channel.workspace, params.get("path"))
            except ConfinedPathRefused as exc:
                raise JsonRpcError(INVALID_PARAMS, str(exc)) from None
            except OSError as exc:
                raise JsonRpcError(INVALID_PARAMS, f"cannot read {params.get('path')}: {exc.strerror or exc}") from None
            line, limit = params.get("line"), params.get("limit")
            if isinstance(line, int) or isinstance(limit, int):
                lines = text.splitlines(keepends=True)
                start = max((line if isinstance(line, int) else 1) - 1, 0)
                end = start + limit if isinstance(limit, int) else None
                text = "".join(lines[start:end])
            channel.updates.put_nowait([FileChange(path=str(path), kind="read")])
            return {"content": text}
        if method == "fs/write_text_file":
            channel = _known(channel)
            content = params.get("content")
            if not isinstance(content, str):
                raise JsonRpcError(INVALID_PARAMS, "fs/write_text_file needs a string content")
            try:
                path, existed = write_text_beneath(channel.workspace, params.get("path"), content)
            except ConfinedPathRefused as exc:
                raise JsonRpcError(INVALID_PARAMS, str(exc)) from None
            except OSError as exc:
                raise JsonRpcError(
                    INVALID_PARAMS, f"cannot write {params.get('path')}: {exc.strerror or exc}"
                ) from None
            channel.updates.put_nowait([FileChange(path=str(path), kind="edited" if existed else "created")])
            return None
        raise JsonRpcError(METHOD_NOT_FOUND, f"method not offered by this client: {method}")

    def cancel_permissions(self, channel: AcpChannel) -> None:
        """Answer every open permission request of ``channel`` with ``cancelled`` (ACP requires it)."""
        for pending in list(channel.open_permissions):
            pending.cancel()

    async def close(self, *, grace: float) -> None:
        if self.rpc is not None:
            await self.rpc.close(grace=grace)


_GEMINI_CALL_ID: Final = re.compile(r"^([A-Za-z_][\w-]*)__\1_\d+_\d+$")
_BARE_NAME: Final = re.compile(r"^[A-Za-z_][\w.-]*$")


def merge_tool_call(merged: dict[str, Any], item: dict[str, Any]) -> None:
    """Merge one ``tool_call`` / ``tool_call_update`` into what is known of the call."""
    for key, value in item.items():
        if value is None or (key == "rawInput" and value == {} and merged.get("rawInput")):
            continue
        if key == "rawInput" and isinstance(value, dict) and isinstance(merged.get("rawInput"), dict):
            value = {**merged["rawInput"], **value}  # an update adds the real arguments to the placeholder
        merged[key] = value


def tool_name(call: dict[str, Any], *, first_title: str | None = None) -> str:
    """The agent's own name for the tool, not the ACP kind where the agent tells it.

    claude-agent-acp puts it in ``_meta.claudeCode.toolName``; ``gemini --acp`` builds the
    call id from it (``run_shell_command__run_shell_command_<ms>_<n>``); ``opencode acp``
    titles its first announcement with it (``bash``) before the title becomes the command.
    """
    meta = call.get("_meta")
    if isinstance(meta, dict):
        for value in meta.values():
            if isinstance(value, dict) and isinstance(value.get("toolName"), str):
                return str(value["toolName"])
    match = _GEMINI_CALL_ID.match(str(call.get("toolCallId") or ""))
    if match:
        return match.group(1)
    if first_title and _BARE_NAME.match(first_title):
        return first_title
    kind = call.get("kind")
    return str(kind) if isinstance(kind, str) and kind else "tool"


def tool_arguments(call: dict[str, Any], name: str) -> dict[str, Any]:
    """The call's ``rawInput``; an agent that sends none (Gemini) is represented by its title,
    which for a shell call (kind ``execute``) is the command: ``{"command": title}``, so the
    permission rules and hard denials read it as they read any shell call."""
    raw = call.get("rawInput")
    if isinstance(raw, dict) and raw:
        return dict(raw)
    title = call.get("title")
    if isinstance(title, str) and title and title != name:
        return {"command": title} if call.get("kind") == "execute" else {"title": title}
    return {}


def _known(channel: AcpChannel | None) -> AcpChannel:
    if channel is None:
        raise JsonRpcError(INVALID_PARAMS, "unknown session")
    return channel


# -- the pool -------------------------------------------------------------------------------------

_POOL: SharedProcessPool[AcpAgent] = SharedProcessPool()


async def acquire_agent(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, timeout: float, key_extra: tuple[Any, ...] = ()
) -> AcpAgent:
    """The running agent for ``argv`` (started and initialized on first use); one more ref."""
    key = (id(asyncio.get_running_loop()), tuple(argv), *key_extra)

    async def start() -> AcpAgent:
        agent = AcpAgent(key, argv)
        await agent.start(env=env, cwd=cwd, timeout=timeout)
        return agent

    return await _POOL.acquire(key, start)


async def release_agent(agent: AcpAgent, *, grace: float) -> None:
    """One ref less; the last one shuts the process group down."""
    await _POOL.release(agent, grace=grace)


def running_agents() -> list[AcpAgent]:
    """The agents this process holds now (for tests and ``providers`` diagnostics)."""
    return _POOL.running()
