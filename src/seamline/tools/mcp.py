"""MCP servers as tool sources, through the official ``mcp`` package (``seamline[mcp]``).

:class:`McpToolSource` starts every configured server when the run asks for tools, one
client session per server per run, and closes them when the run ends. Each session is
opened and closed by one task of its own (the SDK's transports hold anyio cancel scopes,
which must be left by the task that entered them); tool calls go through the session
from the loop's tasks.

A server that cannot start (crashes, hangs past ``startup_timeout``, answers garbage)
gives a classified error: ``transport``, ``timeout`` or ``provider``, with the last lines
of the server's stderr. A stdio server's stderr is kept in a temporary file, not shown
(servers announce themselves there); ``SEAMLINE_DEBUG=1`` passes it through to seamline's. When the server is
not ``required`` the failure is reported and the run goes on without its tools; a call
to a server that died mid-run fails that call with a classified error, and the loop
goes on.

Tool metadata comes from the server's annotations: ``readOnlyHint`` gives class
``read``; ``openWorldHint`` class ``network`` and *reaches outside*; ``destructiveHint``
class ``write``; anything else ``execute``. ``tool_class`` in the config overrides it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from seamline.errors import InvalidRequest, ProviderFailure, SeamlineError, TimeoutFailure, TransportFailure
from seamline.extras import install_hint
from seamline.redact import redact_urls
from seamline.tools.base import Tool, ToolClass
from seamline.tools.mcp_config import McpServerConfig, load_mcp_config
from seamline.tools.sources import ToolSourceContext
from seamline.transport.subprocess import pids_gone

if TYPE_CHECKING:
    import mcp_types
    from mcp.client.session import ClientSession

__all__ = ["McpModule", "McpServerLink", "McpToolSource"]

_CLOSE_TIMEOUT: Final = 10.0
_SERVER_MARKER: Final = "SEAMLINE_MCP_SERVER"
# JSON-RPC codes the SDK uses for a closed connection and a request timeout.
_CONNECTION_CLOSED: Final = -32000
_REQUEST_TIMEOUT: Final = -32001
_STDERR_TAIL: Final = 300  # characters of a failed server's stderr in its error

# The SDK logs a server's bad lines with tracebacks; we classify them ourselves, so its
# records go nowhere unless the application configures logging for "mcp".
logging.getLogger("mcp").addHandler(logging.NullHandler())


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise InvalidRequest(f"MCP servers need the mcp package: {install_hint('mcp')}") from None


class McpServerLink:
    """One server's client session for one run, owned by one task."""

    def __init__(self, config: McpServerConfig, *, workspace: Path | None = None) -> None:
        self.config = config
        self.workspace = workspace
        self.session: ClientSession | None = None
        self.failure: SeamlineError | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Every process of a stdio server carries this in its environment (children inherit
        # it), so close() can end what outlived the server: the SDK ends the server's process
        # group only when the server itself does not exit on end of input.
        self._marker = uuid.uuid4().hex
        self._errlog: IO[str] | None = None  # the stdio server's stderr, kept off the terminal

    @property
    def name(self) -> str:
        return self.config.name

    async def start(self) -> list[mcp_types.Tool]:
        """Open the session and list the server's tools, or raise a classified error."""
        _require_mcp()
        ready: asyncio.Future[list[mcp_types.Tool]] = asyncio.get_running_loop().create_future()
        # A failure that lands after start() gave up is still retrieved, never "unretrieved".
        ready.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        self._task = asyncio.create_task(self._own(ready), name=f"seamline-mcp-{self.name}")
        try:
            return await asyncio.wait_for(asyncio.shield(ready), timeout=self.config.startup_timeout)
        except TimeoutError:
            self.failure = TimeoutFailure(
                f"MCP server {self.name} did not answer within {self.config.startup_timeout:g}s" + self._stderr_tail()
            )
            await self.close(graceful=False)
            raise self.failure from None
        except SeamlineError as exc:
            tail = self._stderr_tail()
            if tail:  # why it failed is often only there
                exc.message += tail
                exc.args = (exc.message,)
            self.failure = exc
            await self.close(graceful=False)
            raise
        except asyncio.CancelledError:
            await self.close(graceful=False)
            raise

    async def _own(self, ready: asyncio.Future[list[mcp_types.Tool]]) -> None:
        from mcp.client.session import ClientSession

        async def on_message(message: object) -> None:
            # The SDK hands transport errors (a line that is not JSON-RPC) to this handler.
            if isinstance(message, Exception) and not ready.done():
                ready.set_exception(
                    TransportFailure(f"MCP server {self.name} answered garbage (a line that is not JSON-RPC)")
                )

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(read, write, message_handler=on_message))
                await session.initialize()
                tools = await _list_tools(session)
                self.session = session
                if not ready.done():
                    ready.set_result(tools)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.set_exception(TransportFailure(f"MCP server {self.name} was stopped while starting"))
            raise
        except BaseException as exc:  # noqa: BLE001 - every failure of a server is classified
            failure = _classify(exc, self.name, starting=not ready.done())
            self.failure = failure
            if not ready.done():
                ready.set_exception(failure)
        finally:
            self.session = None

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        cfg = self.config
        if cfg.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            assert cfg.command is not None
            cwd = cfg.cwd or (str(self.workspace) if self.workspace is not None else None)
            env = {**cfg.env, _SERVER_MARKER: self._marker}
            params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=env, cwd=cwd)
            if os.environ.get("SEAMLINE_DEBUG"):
                return stdio_client(params, errlog=sys.stderr)
            self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # closed in close()
            return stdio_client(params, errlog=self._errlog)
        return self._http()

    def _stderr_tail(self) -> str:
        """``; its stderr ended: …`` (its last lines, passwords out of URLs), or ``""``."""
        errlog = self._errlog
        if errlog is None or errlog.closed:
            return ""
        try:
            fd = errlog.fileno()
            size = os.fstat(fd).st_size
            start = max(0, size - 4 * _STDERR_TAIL)
            text = os.pread(fd, size - start, start).decode("utf-8", errors="replace")
        except OSError:
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        tail = " | ".join(lines)[-_STDERR_TAIL:]
        return f"; its stderr ended: {redact_urls(tail)}" if tail else ""

    @contextlib.asynccontextmanager
    async def _http(self) -> AsyncIterator[Any]:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        assert self.config.url is not None
        async with create_mcp_http_client(headers=dict(self.config.headers) or None) as client:
            async with streamable_http_client(self.config.url, http_client=client) as streams:
                yield streams

    async def call(self, tool_name: str, arguments: dict[str, Any]) -> str:
        """Call one tool; the output as text, or a classified error."""
        session = self.session
        if session is None:
            why = f": {self.failure.message}" if self.failure is not None else ""
            raise TransportFailure(f"MCP server {self.name} is not running{why}")
        try:
            result = await session.call_tool(tool_name, arguments, read_timeout_seconds=self.config.call_timeout)
        except SeamlineError:
            raise
        except Exception as exc:  # noqa: BLE001 - the SDK's failures are classified here
            failure = _classify(exc, self.name, starting=False)
            if failure.kind == "transport":
                # The connection is gone: later calls fail at once instead of waiting on it.
                self.failure = failure
                self.session = None
            raise failure from None
        text = _result_text(result)
        if result.is_error:
            raise ProviderFailure(f"MCP tool {tool_name} of {self.name} failed: {text}")
        return text

    async def close(self, *, graceful: bool = True) -> None:
        """Close the session from its own task; bounded, then cancelled. A server that
        never finished starting is cancelled at once (the transport still ends its process)."""
        task = self._task
        if task is None:
            return
        try:
            await self._close_task(task, graceful=graceful)
        finally:
            if self.config.transport == "stdio":
                await asyncio.shield(asyncio.to_thread(end_marked_processes, _SERVER_MARKER, self._marker))
            if self._errlog is not None:
                self._errlog.close()

    async def _close_task(self, task: asyncio.Task[None], *, graceful: bool) -> None:
        self._stop.set()
        if not graceful or self.session is None:
            task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=_CLOSE_TIMEOUT)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - a dying server has nothing more to say
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task


def end_marked_processes(name: str, value: str) -> list[int]:
    """SIGKILL every process whose environment holds ``name=value``, and wait (bounded)
    until they are gone; the pids signalled.

    The marker is unique to one server of one run, so nothing else is touched; a process
    that cleared its environment is beyond reach (as one that left its group would be).
    """
    entry = f"{name}={value}".encode()
    me = os.getpid()
    killed: list[int] = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return killed  # no /proc: nothing to look through
    for pid in pids:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:
            continue
        if entry in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    pids_gone(killed)  # a SIGKILL lands when the process is next scheduled
    return killed


async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    from mcp_types import PaginatedRequestParams

    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a server that pages forever is cut off
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _result_text(result: mcp_types.CallToolResult) -> str:
    parts: list[str] = []
    for item in result.content:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(str(getattr(item, "text", "")))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {getattr(item, 'mime_type', 'unknown type')}]")
        elif kind == "resource_link":
            parts.append(f"[resource: {getattr(item, 'uri', '')}]")
        elif kind == "resource":
            resource = getattr(item, "resource", None)
            text = getattr(resource, "text", None)
            parts.append(str(text) if text is not None else f"[resource: {getattr(resource, 'uri', '')}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)


def _leaves(exc: BaseException) -> Iterable[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def _classify(exc: BaseException, server: str, *, starting: bool) -> SeamlineError:
    from mcp.shared.exceptions import MCPError

    leaves = list(_leaves(exc))
    for leaf in leaves:
        if isinstance(leaf, SeamlineError):
            return leaf
    for leaf in leaves:
        if isinstance(leaf, MCPError):
            if leaf.code == _REQUEST_TIMEOUT:
                return TimeoutFailure(f"MCP server {server} did not answer in time")
            if leaf.code == _CONNECTION_CLOSED:
                what = "exited before it answered" if starting else "closed the connection"
                return TransportFailure(f"MCP server {server} {what}")
            return ProviderFailure(f"MCP server {server} answered with an error: {leaf.message}")
    for leaf in leaves:
        if isinstance(leaf, FileNotFoundError | PermissionError):
            return TransportFailure(f"MCP server {server} cannot start: {leaf.strerror}: {leaf.filename}")
        if isinstance(leaf, OSError | EOFError) or type(leaf).__module__.startswith(("anyio", "httpx")):
            return TransportFailure(f"MCP server {server} connection failed: {type(leaf).__name__}: {_short(leaf)}")
        if type(leaf).__name__ == "ValidationError":
            return TransportFailure(f"MCP server {server} answered garbage: {_short(leaf)}")
    first = leaves[0] if leaves else exc
    return ProviderFailure(f"MCP server {server} failed: {type(first).__name__}: {_short(first)}")


def _tool_class(tool: mcp_types.Tool, override: str | None) -> tuple[ToolClass, bool]:
    hints = tool.annotations
    open_world = bool(hints and hints.open_world_hint)
    if override is not None:
        return override, open_world  # type: ignore[return-value]
    if hints is None:
        return "execute", False
    if hints.read_only_hint:
        return ("network" if open_world else "read"), open_world
    if open_world:
        return "network", True
    if hints.destructive_hint:
        return "write", False
    return "execute", False


def _make_tool(link: McpServerLink, remote: mcp_types.Tool) -> Tool:
    remote_name = remote.name

    async def call(**arguments: Any) -> str:
        return await link.call(remote_name, arguments)

    tool_class, outside = _tool_class(remote, link.config.tool_class)
    schema = dict(remote.input_schema or {"type": "object", "properties": {}})
    return Tool(
        name=link.config.prefix + remote_name,
        description=(remote.description or remote_name).strip(),
        parameters=schema,
        function=call,
        tool_class=tool_class,
        source="mcp",
        server=link.name,
        reaches_outside=outside,
        _is_async=True,
    )


class McpToolSource:
    """Every configured MCP server as one tool source (the ``mcp`` module adds one).

    >>> from seamline.tools.mcp_config import McpServerConfig, load_mcp_config
    >>> source = McpToolSource([McpServerConfig(name="demo", transport="stdio", command="demo-server")])
    >>> source.name, [s.name for s in source.servers]
    ('mcp', ['demo'])
    """

    name = "mcp"
    # Only servers marked required make get_tools raise; the rest are reported and left out.
    required = True

    def __init__(self, servers: Sequence[McpServerConfig], *, workspace: str | os.PathLike[str] | None = None) -> None:
        self.servers = list(servers)
        self.workspace = Path(workspace) if workspace is not None else None
        self.links: list[McpServerLink] = []

    async def get_tools(self, context: ToolSourceContext) -> list[Tool]:
        if not self.servers:
            return []
        workspace = self.workspace or context.workspace
        self.links = [McpServerLink(cfg, workspace=workspace) for cfg in self.servers]
        results = await asyncio.gather(*(link.start() for link in self.links), return_exceptions=True)
        tools: list[Tool] = []
        for link, outcome in zip(self.links, results, strict=True):
            if isinstance(outcome, BaseException):
                failure = (
                    outcome if isinstance(outcome, SeamlineError) else _classify(outcome, link.name, starting=True)
                )
                if link.config.required:
                    await self.aclose()
                    raise failure
                context.report(f"MCP server {link.name} left out: {failure.kind} error: {failure.message}")
                continue
            for remote in outcome:
                tools.append(_make_tool(link, remote))
        return tools

    async def aclose(self) -> None:
        links, self.links = self.links, []
        await asyncio.gather(*(link.close() for link in links), return_exceptions=True)


class McpModule:
    """The module ``mcp``: adds an :class:`McpToolSource` for ``servers``."""

    name = "mcp"

    def __init__(self, servers: Sequence[McpServerConfig], *, workspace: str | os.PathLike[str] | None = None) -> None:
        self.source = McpToolSource(servers, workspace=workspace)

    @classmethod
    def load(
        cls,
        *,
        workspace: str | os.PathLike[str] | None = None,
        profile: Any = None,
        files: Iterable[str | os.PathLike[str]] = (),
        workspace_file: bool = True,
    ) -> McpModule:
        """The module for the merged configuration: the user's file, the workspace's
        ``.mcp.json`` (unless ``workspace_file=False``), the profile's ``mcp_servers``, then
        ``files`` (later wins)."""
        servers = load_mcp_config(
            workspace=workspace,
            profile_servers=getattr(profile, "mcp_servers", None) or None,
            files=files,
            workspace_file=workspace_file,
        )
        return cls(servers, workspace=workspace)

    def configure(self, builder: Any) -> None:
        builder.add_tool_source(self.source)
