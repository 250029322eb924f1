"""``seamline mcp``: seamline's declared agents and pipelines as MCP tools (see docs/mcp-server.md)."""

from seamline.mcp_server.server import McpFace
from seamline.mcp_server.transports import build_face, serve_http, serve_stdio

__all__ = ["McpFace", "build_face", "serve_http", "serve_stdio"]
