"""Observers and interventions.

An observer implements only the callbacks it needs. A callback may return an
:class:`Intervention` to stop the turn, retry the model call, replace content, or
continue without spending a step. Callbacks run in the order observers were given, and
within one step in this order::

    on_loop_start
    (per step)  on_model_attempt -> on_delta* -> on_response
                (per tool call, in call order) on_tool_call -> on_tool_result
                on_turn_end                     # only when the model asked for no tool
    on_loop_end  |  on_loop_cancelled           # exactly one of them

An observer with ``authorizes = True`` fails closed: if it raises, the tool call it was
asked about is denied (or the turn stops with a ``permission`` error). Any other
observer is telemetry: its exceptions are swallowed and the run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

if TYPE_CHECKING:
    from seamline.events import Event, ToolCall, ToolResult
    from seamline.loop.messages import Message

__all__ = ["Intervention", "LoopContext", "Observer"]


@dataclass(frozen=True, slots=True)
class Intervention:
    """What an observer asks of the loop.

    - ``stop``: end the turn now with ``outcome`` and ``reason``.
    - ``retry``: call the model again, discarding this response (spends a step).
    - ``replace``: use ``content`` instead (assistant text, tool arguments as a JSON
      object string is not needed: pass ``arguments``, or a tool output).
    - ``continue_free``: ask the model again with ``content`` as a user message, without
      spending a step.
    """

    action: Literal["stop", "retry", "replace", "continue_free"]
    reason: str = ""
    content: str | None = None
    arguments: dict[str, object] | None = None
    outcome: Literal["completed", "failed", "aborted"] = "completed"

    @classmethod
    def stop(cls, reason: str, *, outcome: Literal["completed", "failed", "aborted"] = "completed") -> Intervention:
        return cls("stop", reason=reason, outcome=outcome)

    @classmethod
    def retry(cls, reason: str = "retry") -> Intervention:
        return cls("retry", reason=reason)

    @classmethod
    def replace(cls, content: str | None = None, *, arguments: dict[str, object] | None = None) -> Intervention:
        return cls("replace", content=content, arguments=arguments)

    @classmethod
    def continue_free(cls, content: str, reason: str = "continue") -> Intervention:
        return cls("continue_free", reason=reason, content=content)


@dataclass(slots=True)
class LoopContext:
    """What observers see of the run."""

    session_id: str
    turn: int
    step: int = 0
    messages: list[Message] = field(default_factory=list)
    state: dict[str, object] = field(default_factory=dict)


class Observer:
    """Base class with every callback a no-op; override what you need."""

    authorizes: ClassVar[bool] = False

    async def on_loop_start(self, ctx: LoopContext) -> None:
        return None

    async def on_model_attempt(self, ctx: LoopContext, attempt: int, error: Exception | None) -> None:
        return None

    async def on_delta(self, ctx: LoopContext, event: Event) -> None:
        return None

    async def on_response(self, ctx: LoopContext, message: Message) -> Intervention | None:
        return None

    async def on_tool_call(self, ctx: LoopContext, call: ToolCall) -> Intervention | None:
        return None

    async def on_tool_result(self, ctx: LoopContext, call: ToolCall, result: ToolResult) -> Intervention | None:
        return None

    async def on_turn_end(self, ctx: LoopContext, message: Message) -> Intervention | None:
        return None

    async def on_loop_end(self, ctx: LoopContext, outcome: str) -> None:
        return None

    async def on_loop_cancelled(self, ctx: LoopContext) -> None:
        return None
