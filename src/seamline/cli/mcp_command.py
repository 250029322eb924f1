"""``seamline mcp``: seamline as an MCP server (stdio or streamable HTTP)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any, Final

from seamline.cli.main import SeamlineUsage
from seamline.extras import install_hint

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline mcp                                  # stdio; tool `run` under the safe defaults
  seamline mcp --agents agents.toml             # one tool per declared agent and pipeline
  seamline mcp --transport http --port 8766     # http://127.0.0.1:8766/mcp
  claude --mcp-config '{"mcpServers":{"seamline":{"command":"seamline","args":["mcp","--agents","agents.toml"]}}}'

The operator decides what runs, as for `seamline serve --agents FILE`: clients choose
neither programs nor folders. A tool call streams MCP progress notifications, is aborted
by the client's cancellation, and returns the answer with the run id, cost and changed
files; its session is in the store (`seamline sessions`). A tool call the permission
rules leave to `ask` is put to the client as an MCP elicitation where the client offers
it, and denied otherwise: nothing the rules do not allow runs unapproved.
See docs/mcp-server.md.

exit codes: 0 stopped cleanly, 2 usage error (bad flags, missing extra, a bad agents file)
"""


def add_parser(commands: Any) -> str:
    mcp = commands.add_parser(
        "mcp",
        help="serve as an MCP server: declared agents and pipelines as tools (stdio or HTTP)",
        description="Offer seamline's agents, pipelines and sessions to MCP clients.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    mcp.add_argument(
        "--agents", metavar="FILE", help="TOML file of the agents offered as tools (as serve --agents; docs/serve.md)"
    )
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="default: stdio")
    mcp.add_argument("--host", default="127.0.0.1", metavar="ADDR", help="HTTP address (default: 127.0.0.1)")
    mcp.add_argument("--port", type=int, default=8766, metavar="N", help="HTTP port (default: 8766; 0 picks one)")
    mcp.add_argument(
        "--store", metavar="PATH|URL", help="session store (default: $SEAMLINE_STORE or the user data dir)"
    )
    mcp.add_argument("--workspace", "-w", default=".", metavar="DIR", help="default folder for the agents' tools")
    mcp.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "none"),
        default="auto",
        help="backends that run programs run inside bubblewrap (default: auto), as for serve",
    )
    mcp.add_argument(
        "--egress-allow",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="a host sandboxed programs may reach besides their model endpoint; repeatable",
    )
    return "mcp"


def run(args: argparse.Namespace) -> int:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise SeamlineUsage(f"seamline mcp needs the mcp extra: {install_hint('mcp')}") from None
    from seamline.mcp_server import build_face, serve_http, serve_stdio
    from seamline.sessions.sqlite_store import open_store

    if args.transport == "http":
        from seamline.server.guard import is_loopback

        if not is_loopback(args.host):
            raise SeamlineUsage(f"--host {args.host}: seamline mcp serves loopback only (it has no token)")
        if not 0 <= args.port <= 65535:
            raise SeamlineUsage("--port must be 0..65535")
    from seamline.cli.serve_command import listening_socket, operator_agents

    agents = operator_agents(args)
    sock = listening_socket(args.host, args.port, backlog=128) if args.transport == "http" else None
    store = open_store(args.store)
    try:
        face = build_face(
            store,
            workspace=args.workspace,
            agents=agents,
            sandbox=args.sandbox,
            egress_allow=tuple(args.egress_allow),
        )
        if sock is not None:
            asyncio.run(serve_http(face, sock, host=args.host))
        else:
            asyncio.run(serve_stdio(face))
    except KeyboardInterrupt:
        pass
    finally:
        if sock is not None:
            sock.close()
        store.close()
    return 0
