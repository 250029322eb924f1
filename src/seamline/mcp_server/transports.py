"""The two transports of ``seamline mcp``: stdio and streamable HTTP (on loopback unless
the operator binds elsewhere), both the official ``mcp`` SDK's."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Mapping
from typing import Any

from seamline.mcp_server.server import McpFace
from seamline.providers.base import Provider
from seamline.providers.registry import create_provider, provider_class
from seamline.server.agents_file import AgentSpec, ServePolicy
from seamline.server.runs import RunHub
from seamline.sessions.portable_store import SessionStore

__all__ = ["build_face", "serve_http", "serve_stdio"]


def build_face(
    store: SessionStore,
    *,
    workspace: str,
    agents: Mapping[str, AgentSpec] | None = None,
    sandbox: str = "auto",
    egress_allow: tuple[str, ...] = (),
    cancel_grace: float = 2.0,
) -> McpFace:
    """The MCP face over a :class:`RunHub` with ``seamline serve``'s policy: a backend
    that runs programs runs in the envelope unless the operator said ``none``."""
    from pathlib import Path

    from seamline.providers.programs.envelope_launch import operator_envelope

    def backend(name: str, model: str | None, options: Mapping[str, str]) -> Provider:
        mode = options.get("sandbox", sandbox)
        merged = operator_envelope(provider_class(name), options, mode=mode, allow_hosts=egress_allow)
        return create_provider(name, model=model, options=merged)

    policy = ServePolicy(Path(workspace), agents, sandbox=sandbox)
    hub = RunHub(store, workspace=workspace, cancel_grace=cancel_grace, policy=policy, provider_factory=backend)
    return McpFace(hub)


async def serve_stdio(face: McpFace) -> None:
    """Serve one client on stdin/stdout until it closes them."""
    from mcp.server.stdio import stdio_server

    try:
        async with stdio_server() as (read, write):
            await face.server.run(read, write, face.server.create_initialization_options())
    finally:
        await face.close()


async def serve_http(face: McpFace, sock: socket.socket, *, host: str) -> None:
    """Serve streamable HTTP at ``/mcp`` on a bound, listening socket."""
    import uvicorn

    app = face.server.streamable_http_app(host=host)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=5)
    server = _stoppable(uvicorn, face)(config)
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    print(
        f"seamline: MCP over streamable HTTP at http://{shown}:{port}/mcp (Ctrl-C stops)", file=sys.stderr, flush=True
    )
    try:
        await server.serve(sockets=[sock])
    finally:
        await face.close()


def _stoppable(uvicorn: Any, face: McpFace) -> Any:
    class StoppableServer(uvicorn.Server):  # type: ignore[misc]
        """SIGINT and SIGTERM stop the server gracefully and the command exits 0 (uvicorn
        would raise the signal again after its shutdown); the runs still going end
        ``aborted`` first, so the shutdown need not wait on their calls."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            self._captured_signals.clear()
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            loop.call_soon_threadsafe(face.hub.stop_runs)

    return StoppableServer
