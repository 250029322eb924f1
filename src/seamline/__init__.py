"""seamline: one typed seam over every agent backend.

The public surface: the event vocabulary, classified errors, the provider seam, tools,
observers, the store, and :func:`run` / :func:`stream` / :func:`run_sync`.
"""

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
from seamline.loop import Intervention, LoopContext, Observer
from seamline.providers import OptionSpec, PreflightCheck, Provider, ProviderSession, create_provider
from seamline.runner import RunResult, run, run_sync, stream
from seamline.sessions import SessionStore
from seamline.stages import AgentBuilder, AgentProfile, StageSlot, ToolInvocation
from seamline.tools import Tool, ToolContext, Toolset, Workspace, tool, workspace_tools

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
