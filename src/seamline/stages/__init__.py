"""Extension seams: modules, the builder, chat and tool stages in slot order.

See ``docs/modules.md`` and ``docs/stages.md``.
"""

from seamline.stages.builder import AgentBuilder, AgentProfile, MissingModules, RunParts
from seamline.stages.chain import ChatStage, ChatStep, StageChain, ToolInvocation, ToolInvoker, ToolStage
from seamline.stages.modules import ENTRY_POINT_GROUP, Module, available_modules, load_module
from seamline.stages.slots import StageSlot

__all__ = [
    "ENTRY_POINT_GROUP",
    "AgentBuilder",
    "AgentProfile",
    "ChatStage",
    "ChatStep",
    "MissingModules",
    "Module",
    "RunParts",
    "StageChain",
    "StageSlot",
    "ToolInvocation",
    "ToolInvoker",
    "ToolStage",
    "available_modules",
    "load_module",
]
