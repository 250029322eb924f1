"""Tools, tool sets and the built-in workspace tools."""

from seamline.tools.base import Tool, ToolClass, ToolContext, Toolset, ToolSpec, tool
from seamline.tools.workspace import WORKSPACE_TOOL_NAMES, Workspace, workspace_tools

__all__ = [
    "WORKSPACE_TOOL_NAMES",
    "Tool",
    "ToolClass",
    "ToolContext",
    "ToolSpec",
    "Toolset",
    "Workspace",
    "tool",
    "workspace_tools",
]
