"""seamline: one typed seam over every agent backend.

The public surface: :class:`Agent`, the event vocabulary, classified errors, the provider
seam and typed provider settings, tools, observers, the store, and :func:`run` /
:func:`stream` / :func:`run_sync`. ``dir(seamline)`` lists exactly this surface.
"""

from typing import TYPE_CHECKING, Any

from seamline._version import __version__
from seamline.errors import SeamlineError
from seamline.events import (
    Complete,
    Error,
    ErrorKind,
    Event,
    FileChange,
    Mode,
    Outcome,
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
    from seamline.agent import Agent, AgentSession
    from seamline.loop import Intervention, LoopContext, Observer
    from seamline.providers import OptionSpec, PreflightCheck, Provider, ProviderSession, create_provider
    from seamline.providers.settings import (
        ACPSettings,
        AnthropicSettings,
        ClaudeCodeSettings,
        CodexSettings,
        GeminiCLISettings,
        OfflineSettings,
        OpenAISettings,
        OpenCodeSettings,
        ProviderSettings,
        ScriptedSettings,
    )
    from seamline.runner import RunFields, RunOptions, RunResult, run, run_sync, stream
    from seamline.sandbox.probe import SandboxMode
    from seamline.sandbox.runtime import Sandbox
    from seamline.sessions import SessionStore, SQLiteStore
    from seamline.sessions.postgres import PostgresStore
    from seamline.stages import AgentBuilder, AgentProfile, StageSlot, ToolInvocation
    from seamline.tools import Tool, ToolContext, Toolset, Workspace, tool, workspace_tools
    from seamline.tools.approval import Approval

# The events and errors load with the package; the rest on first use, so `import seamline`
# stays cheap for tools that only read or write events.
_LAZY = {
    "Agent": "seamline.agent",
    "AgentSession": "seamline.agent",
    "ACPSettings": "seamline.providers.settings",
    "AnthropicSettings": "seamline.providers.settings",
    "ClaudeCodeSettings": "seamline.providers.settings",
    "CodexSettings": "seamline.providers.settings",
    "GeminiCLISettings": "seamline.providers.settings",
    "OfflineSettings": "seamline.providers.settings",
    "OpenAISettings": "seamline.providers.settings",
    "OpenCodeSettings": "seamline.providers.settings",
    "ProviderSettings": "seamline.providers.settings",
    "ScriptedSettings": "seamline.providers.settings",
    "Intervention": "seamline.loop",
    "LoopContext": "seamline.loop",
    "Observer": "seamline.loop",
    "OptionSpec": "seamline.providers",
    "PreflightCheck": "seamline.providers",
    "Provider": "seamline.providers",
    "ProviderSession": "seamline.providers",
    "create_provider": "seamline.providers",
    "RunFields": "seamline.runner",
    "RunOptions": "seamline.runner",
    "RunResult": "seamline.runner",
    "Sandbox": "seamline.sandbox.runtime",
    "SandboxMode": "seamline.sandbox.probe",
    "Approval": "seamline.tools.approval",
    "run": "seamline.runner",
    "run_sync": "seamline.runner",
    "stream": "seamline.runner",
    "PostgresStore": "seamline.sessions.postgres",
    "SessionStore": "seamline.sessions",
    "SQLiteStore": "seamline.sessions",
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


if not TYPE_CHECKING:  # hidden from type checkers: a misspelt name must be an error there, not Any

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'seamline' has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The public API, lazily loaded names included; nothing private."""
    return sorted(__all__)


__all__ = [
    "ACPSettings",
    "Agent",
    "Approval",
    "AgentBuilder",
    "AgentSession",
    "AnthropicSettings",
    "ClaudeCodeSettings",
    "CodexSettings",
    "AgentProfile",
    "Complete",
    "Error",
    "ErrorKind",
    "Event",
    "FileChange",
    "GeminiCLISettings",
    "Intervention",
    "LoopContext",
    "Mode",
    "Observer",
    "OfflineSettings",
    "OpenAISettings",
    "OpenCodeSettings",
    "OptionSpec",
    "Outcome",
    "PermissionDecision",
    "PermissionRequest",
    "PreflightCheck",
    "Provider",
    "ProviderSession",
    "ProviderSettings",
    "Raw",
    "Reasoning",
    "ReasoningDelta",
    "RunFields",
    "RunOptions",
    "RunResult",
    "Sandbox",
    "SandboxMode",
    "ScriptedSettings",
    "SeamlineError",
    "Session",
    "PostgresStore",
    "SQLiteStore",
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
