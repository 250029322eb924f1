"""The agent loop kernel, its messages and its observers."""

from seamline.loop.kernel import LoopConfig, StepFunction, run_agent_loop
from seamline.loop.messages import Message, ModelRequest
from seamline.loop.observers import Intervention, LoopContext, Observer

__all__ = [
    "Intervention",
    "LoopConfig",
    "LoopContext",
    "Message",
    "ModelRequest",
    "Observer",
    "StepFunction",
    "run_agent_loop",
]
