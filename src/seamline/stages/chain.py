"""Chat stages and tool stages, composed once in slot order.

A *chat stage* is a function that wraps the streaming model call: it gets the next step
function (the next stage, or finally the provider) and returns the step function that
wraps it. A *tool stage* wraps one approved tool call: it gets a :class:`ToolInvocation`
and the next invoker, and returns the tool's output.

Both chains are composed once, when the :class:`StageChain` is built; a chain with no
stages hands back the provider's step and the tool's own ``invoke`` untouched, so a run
without stages pays nothing.

>>> import asyncio
>>> from seamline.stages import StageChain, StageSlot
>>> order = []
>>> def named(name):
...     def wrap(inner):
...         def step(request):
...             order.append(name)
...             return inner(request)
...         return step
...     return wrap
>>> chain = StageChain(chat=[(StageSlot.CUSTOM, named("custom")), (StageSlot.CONTEXT, named("context"))])
>>> async def provider(request):
...     yield "done"
>>> async def call():
...     return [e async for e in chain.wrap_step(provider)(None)]
>>> asyncio.run(call()), order
(['done'], ['context', 'custom'])
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

# The loop declares what it asks of stages (and the invocation it hands them); this chain
# implements it, so stages know the loop and never the other way round.
from seamline.loop.stage_protocol import ToolInvocation, ToolInvoker

if TYPE_CHECKING:
    from seamline.events import Event
    from seamline.loop.messages import ModelRequest

__all__ = [
    "ChatStage",
    "ChatStep",
    "StageChain",
    "ToolInvocation",
    "ToolInvoker",
    "ToolStage",
]

ChatStep = Callable[["ModelRequest"], AsyncIterator["Event"]]
"""One model call: a request in, a stream of events out (the loop's ``StepFunction``)."""

ChatStage = Callable[[ChatStep], ChatStep]
"""A chat stage: given the next step, return the step that wraps it."""


class ToolStage(Protocol):
    """Wraps each approved tool call. Call ``next(invocation)`` to go on; return the output."""

    async def invoke(self, invocation: ToolInvocation, next: ToolInvoker) -> str: ...


def _call_tool(invocation: ToolInvocation) -> Awaitable[str]:
    # The tool's own coroutine, not a wrapper around it: the last link costs one call.
    return invocation.tool.invoke(invocation.arguments, invocation.context)


def _link(stage: ToolStage, following: ToolInvoker) -> ToolInvoker:
    invoke = stage.invoke

    # Returns the stage's own coroutine: one frame per stage, no wrapper coroutine.
    def run(invocation: ToolInvocation) -> Awaitable[str]:
        return invoke(invocation, following)

    return run


def _by_slot(entries: Iterable[tuple[int, Any]]) -> list[tuple[int, Any]]:
    # sorted() is stable: stages of the same slot keep the order they were added in.
    return sorted(entries, key=lambda entry: int(entry[0]))


class StageChain:
    """Chat and tool stages in slot order, composed once.

    ``chat`` and ``tool`` take ``(slot, stage)`` pairs in any order.
    """

    __slots__ = ("chat", "invoke_tool", "tool")

    def __init__(
        self,
        *,
        chat: Iterable[tuple[int, ChatStage]] = (),
        tool: Iterable[tuple[int, ToolStage]] = (),
    ) -> None:
        self.chat: tuple[tuple[int, ChatStage], ...] = tuple(_by_slot(chat))
        self.tool: tuple[tuple[int, ToolStage], ...] = tuple(_by_slot(tool))
        invoker: ToolInvoker = _call_tool
        # The highest slot sits next to the tool, so it is linked first.
        for _, stage in reversed(self.tool):
            invoker = _link(stage, invoker)
        self.invoke_tool: ToolInvoker = invoker
        """Run an invocation through every tool stage, lowest slot first, then the tool."""

    def wrap_step(self, step: ChatStep) -> ChatStep:
        """The step function that passes every chat stage, lowest slot first, then ``step``."""
        for _, wrap in reversed(self.chat):
            step = wrap(step)
        return step

    def __bool__(self) -> bool:
        return bool(self.chat or self.tool)

    def __repr__(self) -> str:
        return f"StageChain(chat={[s for s, _ in self.chat]}, tool={[s for s, _ in self.tool]})"
