"""seamline: one typed seam over every agent backend.

The public surface: the event vocabulary, classified errors, the provider seam, tools,
observers, the store, and :func:`run` / :func:`stream` / :func:`run_sync`.
"""

from typing import TYPE_CHECKING, Any

from seamline.errors import SeamlineError
from seamline.events import (
    Complete,
    Error,
    Event,
    FileChange,
    Mode,
    PermissionDecision,
    PermissionRequest,
    Raw,
    Reasoning,
    ReasoningDelta,
    Session,
    Text,
    TextDelta,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
    decode_event,
    encode_event,
)

if TYPE_CHECKING:
    from seamline.loop import Intervention, LoopContext, Observer
    from seamline.providers import OptionSpec, PreflightCheck, Provider, ProviderSession, create_provider
    from seamline.runner import RunResult, run, run_sync, stream
    from seamline.sessions import SessionStore
    from seamline.stages import AgentBuilder, AgentProfile, StageSlot, ToolInvocation
    from seamline.tools import Tool, ToolContext, Toolset, Workspace, tool, workspace_tools

# The events and errors load with the package; the rest on first use, so `import seamline`
# stays cheap for tools that only read or write events.
_LAZY = {
    "Intervention": "seamline.loop",
    "LoopContext": "seamline.loop",
    "Observer": "seamline.loop",
    "OptionSpec": "seamline.providers",
    "PreflightCheck": "seamline.providers",
    "Provider": "seamline.providers",
    "ProviderSession": "seamline.providers",
    "create_provider": "seamline.providers",
    "RunResult": "seamline.runner",
    "run": "seamline.runner",
    "run_sync": "seamline.runner",
    "stream": "seamline.runner",
    "SessionStore": "seamline.sessions",
    "AgentBuilder": "seamline.stages",
    "AgentProfile": "seamline.stages",
    "StageSlot": "seamline.stages",
    "ToolInvocation": "seamline.stages",
    "Tool": "seamline.tools",
    "ToolContext": "seamline.tools",
    "Toolset": "seamline.tools",
    "Workspace": "seamline.tools",
    "tool": "seamline.tools",
    "workspace_tools": "seamline.tools",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'seamline' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "AgentBuilder",
    "AgentProfile",
    "Complete",
    "Error",
    "Event",
    "FileChange",
    "Intervention",
    "LoopContext",
    "Mode",
    "Observer",
    "OptionSpec",
    "PermissionDecision",
    "PermissionRequest",
    "PreflightCheck",
    "Provider",
    "ProviderSession",
    "Raw",
    "Reasoning",
    "ReasoningDelta",
    "RunResult",
    "SeamlineError",
    "Session",
    "SessionStore",
    "StageSlot",
    "Text",
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolInvocation",
    "ToolProgress",
    "ToolResult",
    "Toolset",
    "Usage",
    "Workspace",
    "__version__",
    "create_provider",
    "decode_event",
    "encode_event",
    "run",
    "run_sync",
    "stream",
    "tool",
    "workspace_tools",
]
