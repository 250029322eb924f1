"""The permission bridge: agent CLIs that delegate their permission prompts over MCP
(Claude Code's ``--permission-prompt-tool``) get the answers of seamline's permission
service, so rules, ``--yes``, prompts and hard denials are the same for them as for the
tools seamline runs itself.

The bridge serves one MCP tool, ``approve``, over streamable HTTP on 127.0.0.1 (a free
port) for as long as the ``async with`` block lasts. Claude Code calls it with the tool
it wants to run (``tool_name``, ``input``, ``tool_use_id``) and gets back the JSON text
``{"behavior": "allow", "updatedInput": …}`` or ``{"behavior": "deny", "message": …}``.
:meth:`PermissionBridge.claude_args` gives the flags that point Claude Code at it.

Needs ``seamline[mcp]`` (the ``mcp`` package, which brings uvicorn).
"""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

from seamline.errors import InvalidRequest, TransportFailure
from seamline.events import Event, ToolCall
from seamline.extras import install_hint
from seamline.tools.approval import Approval
from seamline.tools.base import Tool, ToolClass

__all__ = ["CLAUDE_TOOL_CLASSES", "GEMINI_TOOL_CLASSES", "PermissionBridge"]

# Claude Code's own tools and their classes; a tool not listed is treated as "execute".
CLAUDE_TOOL_CLASSES: Final[Mapping[str, ToolClass]] = {
    "Read": "read",
    "Glob": "read",
    "Grep": "read",
    "LS": "read",
    "NotebookRead": "read",
    "TodoWrite": "read",
    "BashOutput": "read",
    "Edit": "write",
    "MultiEdit": "write",
    "Write": "write",
    "NotebookEdit": "write",
    "Bash": "execute",
    "KillShell": "execute",
    "Task": "execute",
    "WebFetch": "network",
    "WebSearch": "network",
}
# The Gemini CLI's own tools (as its BeforeTool hook names them); others are "execute".
GEMINI_TOOL_CLASSES: Final[Mapping[str, ToolClass]] = {
    "read_file": "read",
    "read_many_files": "read",
    "list_directory": "read",
    "glob": "read",
    "search_file_content": "read",
    "grep_search": "read",
    "write_todos": "read",
    "write_file": "write",
    "replace": "write",
    "save_memory": "write",
    "run_shell_command": "execute",
    "web_fetch": "network",
    "google_web_search": "network",
}
SERVER_NAME: Final = "seamline"
TOOL_NAME: Final = "approve"


def _never(**_: Any) -> str:
    raise InvalidRequest("a bridged tool runs in the agent CLI, never here")


class PermissionBridge:
    """An MCP server with one tool, ``approve``, answered by ``approval``.

    ``on_event`` receives the ``permission_request`` / ``permission_decision`` events of
    each decision, so a provider can put them into its turn's event stream.
    """

    def __init__(
        self,
        approval: Approval,
        *,
        tool_classes: Mapping[str, ToolClass] = CLAUDE_TOOL_CLASSES,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        self.approval = approval
        self.tool_classes = dict(tool_classes)
        self.on_event = on_event
        self.url = ""
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    async def approve(self, tool_name: str, input: dict[str, Any], tool_use_id: str | None = None) -> str:
        """Decide one delegated prompt; the JSON text the agent CLI expects."""
        tool = Tool(
            name=tool_name,
            description="",
            parameters={},
            function=_never,
            tool_class=self.tool_classes.get(tool_name, "execute"),
            source="agent",
        )
        call = ToolCall(call_id=tool_use_id or uuid.uuid4().hex, name=tool_name, arguments=dict(input), source="agent")
        decision = await self.approval.decide(tool, call)
        if self.on_event is not None:
            for event in decision.events:
                self.on_event(event)
        if decision.allow:
            return json.dumps({"behavior": "allow", "updatedInput": input})
        return json.dumps({"behavior": "deny", "message": decision.reason or "denied"})

    def mcp_config(self) -> dict[str, Any]:
        """The ``--mcp-config`` object naming this bridge."""
        return {"mcpServers": {SERVER_NAME: {"type": "http", "url": self.url}}}

    def claude_args(self) -> list[str]:
        """Claude Code flags that route its permission prompts here."""
        return [
            "--mcp-config",
            json.dumps(self.mcp_config()),
            "--permission-prompt-tool",
            f"mcp__{SERVER_NAME}__{TOOL_NAME}",
        ]

    async def __aenter__(self) -> PermissionBridge:
        try:
            import uvicorn
            from mcp.server.mcpserver import MCPServer
        except ImportError:
            raise InvalidRequest(f"the permission bridge needs the mcp package: {install_hint('mcp')}") from None
        server = MCPServer(SERVER_NAME)

        async def approve(tool_name: str, input: dict[str, Any], tool_use_id: str | None = None) -> str:
            """Decide whether the agent may run a tool; answers allow or deny as JSON."""
            return await self.approve(tool_name, input, tool_use_id)

        # Claude Code wants exactly one text block back: no structured content beside it.
        server.tool(name=TOOL_NAME, structured_output=False)(approve)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            server.streamable_http_app(host="127.0.0.1"), log_level="warning", access_log=False, lifespan="on"
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="seamline-permission-bridge")
        for _ in range(500):
            if self._server.started or self._task.done():
                break
            await asyncio.sleep(0.01)
        if not self._server.started:
            await self.__aexit__()
            raise TransportFailure("the permission bridge did not start")
        self.url = f"http://127.0.0.1:{port}/mcp"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(task, timeout=10)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
