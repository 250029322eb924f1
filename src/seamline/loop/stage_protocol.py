"""What the loop asks of stages, declared here so that the loop never imports them.

:class:`seamline.stages.StageChain` is the implementation; the loop only needs a chain that
wraps the model call (``wrap_step``) and runs an approved tool call (``invoke_tool``), and
whether it holds any chat or tool stage at all (a run without stages pays nothing).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from seamline.events import Event, ToolCall
    from seamline.loop.messages import ModelRequest
    from seamline.tools.base import Tool, ToolClass, ToolContext

__all__ = ["LoopStages", "ToolInvocation", "ToolInvoker"]


@dataclass(slots=True)
class ToolInvocation:
    """One approved tool call on its way through the tool stages.

    ``arguments`` is what the tool will get; a stage may replace or change it (a masking
    stage puts the real values back here). ``call`` stays as the model sent it.
    """

    tool: Tool
    call: ToolCall
    arguments: dict[str, object]
    tool_class: ToolClass
    session_id: str
    turn_id: int
    context: ToolContext


ToolInvoker = Callable[[ToolInvocation], Awaitable[str]]
"""The rest of the chain: the next stages and finally the tool; returns the tool's output."""


class LoopStages(Protocol):
    """The stages of one turn, as the loop uses them."""

    @property
    def chat(self) -> Sized: ...

    @property
    def tool(self) -> Sized: ...

    @property
    def invoke_tool(self) -> ToolInvoker: ...

    def wrap_step(
        self, step: Callable[[ModelRequest], AsyncIterator[Event]]
    ) -> Callable[[ModelRequest], AsyncIterator[Event]]: ...
