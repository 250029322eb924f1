"""The shared half of the OpenCode provider: one ``opencode serve`` for many sessions.

An :class:`OpenCodeServer` is ``opencode serve --port N --hostname 127.0.0.1`` on a free
port chosen here (the program does not honour port 0), started in its own process group,
polled at ``/global/health`` until it answers, and subscribed to its event stream
(``GET /event``, server-sent events of ``{type, properties}``). Events are routed to the
queue of the session they name. The server is reference counted: started by the first
session, stopped (the whole process group) when the last one closes.

Failures are classified: a server that exits before it answers its health check is a
``TransportFailure`` with its exit code and stderr, one that never answers is a
``TimeoutFailure``, an event stream that breaks is a ``TransportFailure`` delivered to
every session waiting on it.

What the server reads from a session's folder: with ``OPENCODE_DISABLE_PROJECT_CONFIG``
set, opencode-ai 1.18.33 leaves the repository's ``opencode.json`` (its MCP servers,
permissions, providers, agents) and its ``AGENTS.md`` unread, but its second configuration
loader still imports the plugins it finds from that folder up to the git worktree's root
(``/`` outside a repository): the files in ``.opencode/plugin/`` and ``.opencode/plugins/``,
and those an ``opencode.json``/``opencode.jsonc`` lists under ``plugin`` or ``plugins``.
:func:`plugins_despite_the_flag` finds them so that the provider can refuse to start
the server there; :func:`project_instructions` reads the ``AGENTS.md`` OpenCode would have.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec

from seamline.extras import install_hint

try:
    import httpx2
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(f"{exc}; install it with: {install_hint('opencode')}") from None

from seamline.errors import ProviderFailure, SeamlineError, TimeoutFailure, TransportFailure
from seamline.sandbox.private_files import PrivatePathRefused, read_file_beneath
from seamline.transport.pool import SharedProcessPool
from seamline.transport.sse import read_sse
from seamline.transport.subprocess import LineProcess

__all__ = [
    "INSTRUCTION_FILES",
    "OpenCodeServer",
    "ServerChannel",
    "acquire_server",
    "free_port",
    "plugins_despite_the_flag",
    "project_instructions",
    "release_server",
    "running_servers",
]

_HEALTH_POLL: Final = 0.1
#: what OpenCode reads as the project's instructions: the first of these it finds
INSTRUCTION_FILES: Final = ("AGENTS.md", "CLAUDE.md", "CONTEXT.md")
_INSTRUCTIONS_LIMIT: Final = 256 * 1024
_CONFIG_FILES: Final = ("opencode.json", "opencode.jsonc")
_CONFIG_LIMIT: Final = 1024 * 1024
_PLUGIN_KEY: Final = re.compile(rb'"plugins?"\s*:')

#: (command line, port) -> (command line, environment, host port): how the envelope runs it
Wrap = Callable[[list[str], int], Awaitable[tuple[list[str], dict[str, str], int]]]


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (opencode ignores ``--port 0``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(eq=False)
class ServerChannel:
    """What the server routes to one session: its events, or the failure that ended them."""

    session_id: str
    events: asyncio.Queue[dict[str, Any] | SeamlineError] = field(default_factory=asyncio.Queue)


class OpenCodeServer:
    """One running ``opencode serve`` with an HTTP client and its event stream."""

    def __init__(self, key: tuple[Any, ...], argv: Sequence[str]) -> None:
        self.key = key
        self.argv = list(argv)
        self.port = 0
        self.process: LineProcess | None = None
        self.client: httpx2.AsyncClient | None = None
        self.channels: dict[str, ServerChannel] = {}
        self.failure: SeamlineError | None = None
        self.refs = 0
        self.version = ""
        self._stdout: collections.deque[str] = collections.deque(maxlen=50)
        self._tasks: list[asyncio.Task[None]] = []
        self._connected = asyncio.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.failure is None and self.process is not None and self.process.returncode is None

    # -- start --------------------------------------------------------------------------------
    async def start(
        self, *, env: Mapping[str, str], cwd: str, startup_timeout: float, wrap: Wrap | None = None
    ) -> None:
        self.port = free_port()
        argv = [*self.argv, "serve", "--port", str(self.port), "--hostname", "127.0.0.1"]
        if wrap is not None:
            # Inside the envelope: the command line that runs it there, and the host port
            # that reaches the server's port inside.
            argv, env, self.port = await wrap(argv, self.port)
        self.process = await LineProcess.spawn(argv, env=env, cwd=cwd)
        self._tasks.append(asyncio.create_task(self._drain_stdout()))
        # No overall timeout on the client: the event stream is long-lived; each call sets its own.
        self.client = httpx2.AsyncClient(base_url=self.base_url, timeout=httpx2.Timeout(30.0, read=None))
        try:
            await self._wait_healthy(startup_timeout)
            self._tasks.append(asyncio.create_task(self._read_events()))
            try:
                await asyncio.wait_for(self._connected.wait(), timeout=startup_timeout)
            except TimeoutError:
                if self.failure is not None:
                    raise self.failure from None
                raise TimeoutFailure(
                    f"opencode: its event stream did not connect within {startup_timeout:g} s"
                ) from None
        except BaseException:
            await self.close(grace=1.0)
            raise

    async def _wait_healthy(self, timeout: float) -> None:
        assert self.process is not None and self.client is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last = ""
        while True:
            if self.process.returncode is not None:
                # The exit can be seen before its stderr is read: wait for stderr's end (capped).
                await self.process.wait()
                raise TransportFailure(
                    f"opencode serve exited with code {self.process.returncode} before it came up{self._tail()}"
                )
            try:
                response = await self.client.get("/global/health", timeout=2.0)
                if response.status_code == 200:
                    body = response.json()
                    if isinstance(body, dict) and body.get("healthy"):
                        self.version = str(body.get("version") or "")
                        return
                last = f"HTTP {response.status_code}"
            except (httpx2.HTTPError, ValueError) as exc:
                last = type(exc).__name__
            if loop.time() >= deadline:
                raise TimeoutFailure(
                    f"opencode serve did not come up on 127.0.0.1:{self.port} within {timeout:g} s"
                    f" (last health check: {last}){self._tail()}"
                )
            await asyncio.sleep(_HEALTH_POLL)

    def _tail(self) -> str:
        tail = self.process.stderr_tail(5).strip() if self.process is not None else ""
        tail = tail or "\n".join(list(self._stdout)[-5:]).strip()
        return f"; output: {tail[-500:]}" if tail else ""

    async def _drain_stdout(self) -> None:
        # The server logs to stdout; it must be read or the pipe fills and the server stalls.
        assert self.process is not None
        async for line in self.process.lines():
            self._stdout.append(line.decode("utf-8", "replace"))

    async def _read_events(self) -> None:
        assert self.client is not None
        try:
            async with self.client.stream("GET", "/event", headers={"accept": "text/event-stream"}) as response:
                if response.status_code != 200:
                    raise TransportFailure(f"opencode: GET /event answered HTTP {response.status_code}")
                async for sse in read_sse(response, what="opencode's event stream"):
                    try:
                        event = msgspec.json.decode(sse.data)
                    except msgspec.DecodeError:
                        raise ProviderFailure(f"opencode: an event that is not JSON: {sse.data[:200]}") from None
                    if not isinstance(event, dict):
                        continue
                    if event.get("type") == "server.connected":
                        self._connected.set()
                    self._route(event)
            raise TransportFailure("opencode's event stream ended (the server closed it)")
        except asyncio.CancelledError:
            raise
        except SeamlineError as exc:
            self._fail(exc)
        except Exception as exc:  # noqa: BLE001 - any break of the stream is a transport failure
            self._fail(TransportFailure(f"opencode's event stream broke: {type(exc).__name__}: {exc}"))

    def _route(self, event: dict[str, Any]) -> None:
        props = event.get("properties")
        if not isinstance(props, dict):
            return
        sid = props.get("sessionID")
        if not isinstance(sid, str):
            info = props.get("info") or props.get("part")
            sid = info.get("sessionID") if isinstance(info, dict) else None
        channel = self.channels.get(sid) if isinstance(sid, str) else None
        if channel is not None:
            channel.events.put_nowait(event)

    def _fail(self, failure: SeamlineError) -> None:
        if self.failure is None:
            self.failure = failure
        for channel in self.channels.values():
            channel.events.put_nowait(failure)

    # -- HTTP ---------------------------------------------------------------------------------
    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        timeout: float,
    ) -> Any:
        """One HTTP call; the JSON answer (None when empty). Failures are classified."""
        if self.client is None:
            raise TransportFailure("opencode: the server is not running")
        if self.failure is not None and not isinstance(self.failure, TransportFailure):
            raise self.failure
        try:
            response = await self.client.request(method, path, json=body, params=params, timeout=timeout)
        except httpx2.TimeoutException:
            raise TimeoutFailure(f"opencode: {method} {path} got no answer within {timeout:g} s") from None
        except httpx2.HTTPError as exc:
            raise TransportFailure(f"opencode: {method} {path} failed: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 400:
            text = response.text[:300]
            raise ProviderFailure(f"opencode: {method} {path} answered HTTP {response.status_code}: {text}")
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise ProviderFailure(f"opencode: {method} {path} answered with something not JSON") from None

    # -- stop ----------------------------------------------------------------------------------
    async def close(self, *, grace: float) -> None:
        if self.failure is None:
            self.failure = TransportFailure("opencode: the server was stopped")
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.aclose()
        if self.process is not None:
            await self.process.end(grace=grace)


_POOL: SharedProcessPool[OpenCodeServer] = SharedProcessPool()


async def acquire_server(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    startup_timeout: float,
    key_extra: tuple[Any, ...] = (),
    wrap: Wrap | None = None,
) -> OpenCodeServer:
    """The running server for this command and configuration; one more ref."""
    key = (id(asyncio.get_running_loop()), tuple(argv), *key_extra)

    async def start() -> OpenCodeServer:
        server = OpenCodeServer(key, argv)
        await server.start(env=env, cwd=cwd, startup_timeout=startup_timeout, wrap=wrap)
        return server

    return await _POOL.acquire(key, start)


async def release_server(server: OpenCodeServer, *, grace: float) -> None:
    """One ref less; the last one stops the server's process group."""
    await _POOL.release(server, grace=grace)


def running_servers() -> list[OpenCodeServer]:
    """The servers this process holds now."""
    return _POOL.running()


# -- what the server reads from a session's folder ----------------------------------------------
def plugins_despite_the_flag(directory: Path, *, home: Path | None = None) -> list[Path]:
    """The plugin files, plugin folders and configuration files listing plugins that
    opencode-ai 1.18.33 loads for ``directory`` even with ``OPENCODE_DISABLE_PROJECT_CONFIG``
    (see the module's docstring), from ``directory`` up to the folder holding ``.git``, else
    ``/``. The user's own ``home`` (default: ``~``) is theirs, not a repository's: passed
    over. Nothing is followed or opened but a regular file; a link or anything that cannot
    be read where a plugin could be is counted, since OpenCode would follow it."""
    skip = (home or Path.home()).resolve()
    found: list[Path] = []
    folder = directory.resolve()
    while True:
        if folder != skip:
            found += _listed_plugins(folder)
            dot = folder / ".opencode"
            if dot.is_symlink() or (os.path.lexists(dot) and not dot.is_dir()):
                found.append(dot)
            elif dot.is_dir():
                found += _listed_plugins(dot)
                for name in ("plugin", "plugins"):
                    found += _plugin_files(dot / name)
        if os.path.lexists(folder / ".git") or folder.parent == folder:
            return found
        folder = folder.parent


def _listed_plugins(folder: Path) -> list[Path]:
    found: list[Path] = []
    for name in _CONFIG_FILES:
        if not os.path.lexists(folder / name):
            continue
        try:
            data, _ = read_file_beneath(folder, (name,), limit=_CONFIG_LIMIT)
        except (PrivatePathRefused, OSError):
            found.append(folder / name)
            continue
        if _PLUGIN_KEY.search(data):
            found.append(folder / name)
    return found


def _plugin_files(folder: Path) -> list[Path]:
    if folder.is_symlink():
        return [folder]
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except (NotADirectoryError, FileNotFoundError):
        return []
    except OSError:
        return [folder]
    return [folder / e.name for e in entries if e.name.endswith((".ts", ".js"))]


def project_instructions(workspace: Path, *, claude_md: bool = True) -> str | None:
    """The workspace's first of :data:`INSTRUCTION_FILES` (``CLAUDE.md`` only where
    ``claude_md``) as OpenCode gives it to the model, read without following a link (a link,
    or a file over 256 KiB, is passed over); None when there is none."""
    for name in INSTRUCTION_FILES:
        if name == "CLAUDE.md" and not claude_md:
            continue
        try:
            data, _ = read_file_beneath(workspace, (name,), limit=_INSTRUCTIONS_LIMIT)
        except (PrivatePathRefused, OSError):
            continue
        return f"Instructions from: {workspace / name}\n{data.decode('utf-8', errors='replace')}"
    return None
