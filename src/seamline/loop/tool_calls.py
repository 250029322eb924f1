"""The tool calls of one step: approve each, run the allowed ones concurrently, report in
call order. Only approved calls reach the tool stages."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

from seamline.errors import SeamlineError
from seamline.events import Error, Event, PermissionDecision, ToolCall, ToolResult
from seamline.loop.messages import Message
from seamline.loop.observer_calls import ObserverGroups, notify
from seamline.loop.observers import LoopContext, Observer
from seamline.loop.stage_protocol import LoopStages, ToolInvocation
from seamline.tools.approval import Approval
from seamline.tools.base import Tool, ToolContext, Toolset

__all__ = ["replaced_result", "reported", "run_calls", "settle", "tool_message"]

Settled = tuple[str, BaseException | None]


class _Planned:
    """One call on its way: the events before it, what the tool emits, and either the job
    that will give its output or, for a call that never runs, its result already."""

    __slots__ = ("before", "call", "emitted", "job", "result")

    def __init__(self, call: ToolCall) -> None:
        self.call = call
        self.before: list[Event] = []
        self.emitted: list[Event] = []
        self.job: Awaitable[str] | None = None
        self.result: ToolResult | None = None

    def refuse(self, output: str, *, is_error: bool = True) -> _Planned:
        self.result = ToolResult(call_id=self.call.call_id, output=output, is_error=is_error, name=self.call.name)
        return self


async def run_calls(
    calls: list[ToolCall],
    tools: Toolset,
    gate: Approval,
    obs: ObserverGroups,
    ctx: LoopContext,
    stages: LoopStages | None = None,
) -> list[tuple[_Planned, Settled | None]]:
    """Approve every call, run the allowed ones concurrently; each call with its outcome
    (``None`` for one that never ran), in call order. The loop reports them in that order
    (:func:`reported`, then :func:`replaced_result` when observers watch tool results)."""
    planned: list[_Planned] = []
    jobs: list[Awaitable[str] | None] = []
    for call in calls:  # one by one: approval may ask, in call order
        plan = await _plan(call, tools, gate, obs, ctx, stages)
        planned.append(plan)
        jobs.append(plan.job)
    return list(zip(planned, await settle(jobs), strict=True))


def reported(plan: _Planned, outcome: Settled | None) -> tuple[list[Event], ToolResult]:
    """The events to report before a call's result (permission, what the tool emitted, a
    sandbox or timeout failure), and the result."""
    events = plan.before + plan.emitted
    result = plan.result if outcome is None else _result_of(plan.call, outcome, events)
    assert result is not None
    return events, result


async def replaced_result(
    observers: Sequence[Observer], ctx: LoopContext, call: ToolCall, result: ToolResult
) -> ToolResult:
    """``on_tool_result`` observers may replace the output the model gets."""
    iv = await notify(observers, "on_tool_result", ctx, call, result)
    if iv is not None and iv.action == "replace" and iv.content is not None:
        return ToolResult(call_id=result.call_id, output=iv.content, is_error=result.is_error, name=result.name)
    return result


def tool_message(call: ToolCall, result: ToolResult) -> Message:
    """The tool message that answers ``call`` in the conversation."""
    return Message(role="tool", content=result.output, call_id=call.call_id, name=call.name, is_error=result.is_error)


async def _plan(
    call: ToolCall,
    tools: Toolset,
    gate: Approval,
    obs: ObserverGroups,
    ctx: LoopContext,
    stages: LoopStages | None,
) -> _Planned:
    plan = _Planned(call)
    arguments = call.arguments
    if obs.tool_call:
        iv = await notify(obs.tool_call, "on_tool_call", ctx, call)
        if iv is not None and iv.action == "stop":
            return plan.refuse(f"stopped: {iv.reason}")
        if iv is not None and iv.action == "replace":
            if iv.arguments is not None:
                arguments = iv.arguments
            elif iv.content is not None:
                return plan.refuse(iv.content, is_error=False)
    found = tools.get(call.name)
    if found is None:
        known = ", ".join(tools.names()) or "none"
        return plan.refuse(f"unknown tool {call.name!r}; available: {known}")
    decision = await gate.decide(found, call)
    # A gate that reports its own permission events (request, decision) is trusted to.
    if decision.events:
        plan.before.extend(decision.events)
    if not decision.allow:
        if not decision.events:
            plan.before.append(PermissionDecision(request_id=call.call_id, decision="deny", reason=decision.reason))
        plan.before.append(Error(kind="permission", message=decision.reason))
        return plan.refuse(f"permission denied: {decision.reason}")
    plan.job = _job(found, call, arguments, plan.emitted, tools, ctx, stages)
    return plan


def _job(
    found: Tool,
    call: ToolCall,
    arguments: dict[str, Any],
    emitted: list[Event],
    tools: Toolset,
    ctx: LoopContext,
    stages: LoopStages | None,
) -> Awaitable[str]:
    if stages is None and not found.takes_context:
        return found.invoke(arguments)  # nothing could emit or read a context: none is made
    tctx = ToolContext(
        call_id=call.call_id,
        session_id=ctx.session_id,
        turn_id=ctx.turn,
        emit=emitted.append,
        workspace=tools.workspace,
    )
    if stages is None:
        return found.invoke(arguments, tctx)
    invocation = ToolInvocation(
        tool=found,
        call=call,
        arguments=dict(arguments),
        tool_class=found.tool_class,
        session_id=ctx.session_id,
        turn_id=ctx.turn,
        context=tctx,
    )
    return stages.invoke_tool(invocation)


def _result_of(call: ToolCall, outcome: Settled, events: list[Event]) -> ToolResult:
    """The result the model gets for a call that ran; a sandbox, permission or timeout
    failure is also reported as an event (added to ``events``)."""
    value, exc = outcome
    if exc is None:
        return ToolResult(call_id=call.call_id, output=value, name=call.name)
    if isinstance(exc, SeamlineError):
        if exc.kind in ("sandbox", "permission", "timeout"):
            events.append(exc.to_event())
        return ToolResult(
            call_id=call.call_id, output=f"{exc.kind} error: {exc.message}", is_error=True, name=call.name
        )
    return ToolResult(
        call_id=call.call_id, output=f"tool failed: {type(exc).__name__}: {exc}", is_error=True, name=call.name
    )


async def settle(jobs: list[Awaitable[str] | None]) -> list[Settled | None]:
    """Run the tool coroutines concurrently and collect each one's value or exception.

    A single call is awaited in place: no task, no wait set (the common case, and the
    hot path of a tool loop).
    """
    live = jobs if len(jobs) == 1 else [j for j in jobs if j is not None]
    if len(live) == 1 and (only := live[0]) is not None:
        try:
            single: Settled = (await only, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a tool's failure is reported to the model
            single = ("", exc)
        return [single] if len(jobs) == 1 else [single if j is not None else None for j in jobs]
    tasks = [asyncio.ensure_future(j) if j is not None else None for j in jobs]
    running = [t for t in tasks if t is not None]
    if running:
        try:
            await asyncio.wait(running)
        except asyncio.CancelledError:
            for t in running:
                t.cancel()
            # Each call ends what it started (a shell's process group) before the cancel goes on.
            await asyncio.wait(running)
            raise
    return [None if task is None else _outcome(task) for task in tasks]


def _outcome(task: asyncio.Future[str]) -> Settled:
    exc = task.exception()
    return ("", exc) if exc is not None else (task.result(), None)
