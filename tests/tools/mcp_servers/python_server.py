"""A small MCP server built with the official SDK, for tests: stdio or streamable HTTP.

python python_server.py stdio
python python_server.py http PORT
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("seamline-test")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "slept"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail() -> str:
    """Always fails."""
    raise ValueError("this tool always fails")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def die() -> str:
    """Crash the server."""
    os._exit(3)


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def wipe(target: str) -> str:
    """Pretend to delete something."""
    return f"wiped {target}"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        # As the reference server does: a start-up line on stderr, which is not the user's.
        print("Starting seamline-test (STDIO) server...", file=sys.stderr, flush=True)
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
