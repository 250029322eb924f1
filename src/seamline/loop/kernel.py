"""The agent loop kernel: model call, tool calls, observers, until the model answers.

The kernel knows no provider: it calls a *step* function that streams the events of one
model call. It never raises for a failure of the run: every turn ends with exactly one
``complete`` event, failures before it as classified ``error`` events.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from seamline.errors import InvalidRequest, PermissionDenied, SeamlineError
from seamline.events import (
    Complete,
    Error,
    Event,
    PermissionDecision,
    Reasoning,
    ReasoningDelta,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
)
from seamline.loop.messages import Message, ModelRequest
from seamline.loop.observers import Intervention, LoopContext, Observer
from seamline.stages.chain import StageChain, ToolInvocation
from seamline.tools.approval import Approval
from seamline.tools.base import ToolContext, Toolset
from seamline.tools.permissions import PermissionService

__all__ = ["LoopConfig", "StepFunction", "run_agent_loop"]

StepFunction = Callable[[ModelRequest], AsyncIterator[Event]]


class LoopConfig:
    """Limits of one turn. ``max_steps`` bounds model calls that spend a step."""

    __slots__ = ("max_free_continues", "max_steps", "params")

    def __init__(
        self, *, max_steps: int = 50, max_free_continues: int = 8, params: dict[str, Any] | None = None
    ) -> None:
        if max_steps < 1:
            raise InvalidRequest("max_steps must be at least 1")
        self.max_steps = max_steps
        self.max_free_continues = max_free_continues
        self.params = params or {}


def _overrides(observers: Sequence[Observer], name: str) -> list[Observer]:
    base = getattr(Observer, name)
    return [o for o in observers if getattr(type(o), name, base) is not base]


class _Observers:
    """Observers grouped per callback, so a run without observers pays nothing."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.start = _overrides(observers, "on_loop_start")
        self.attempt = _overrides(observers, "on_model_attempt")
        self.delta = _overrides(observers, "on_delta")
        self.response = _overrides(observers, "on_response")
        self.tool_call = _overrides(observers, "on_tool_call")
        self.tool_result = _overrides(observers, "on_tool_result")
        self.turn_end = _overrides(observers, "on_turn_end")
        self.end = _overrides(observers, "on_loop_end")
        self.cancelled = _overrides(observers, "on_loop_cancelled")


async def _notify(observers: list[Observer], name: str, *args: Any) -> Intervention | None:
    """Call ``name`` on each observer; first intervention wins. Authorizers fail closed."""
    chosen: Intervention | None = None
    for obs in observers:
        try:
            result = await getattr(obs, name)(*args)
        except Exception as exc:  # noqa: BLE001 - observer code is foreign; classify it
            if obs.authorizes:
                raise PermissionDenied(f"authorizing observer {type(obs).__name__}.{name} failed: {exc}") from None
            continue
        if chosen is None and isinstance(result, Intervention):
            chosen = result
    return chosen


async def run_agent_loop(
    *,
    step: StepFunction,
    messages: list[Message],
    tools: Toolset,
    session_id: str,
    turn: int = 1,
    model: str | None = None,
    observers: Sequence[Observer] = (),
    approval: Approval | None = None,
    config: LoopConfig | None = None,
    aborted: Callable[[], bool] = lambda: False,
    stages: StageChain | None = None,
) -> AsyncIterator[Event]:
    """Run one turn. ``messages`` already ends with the user's prompt and is extended in place.

    ``stages``: chat stages wrap every model call, tool stages every approved tool call,
    in slot order (see :mod:`seamline.stages`). Without stages nothing is wrapped.
    """
    cfg = config or LoopConfig()
    if stages is not None and stages.chat:
        step = stages.wrap_step(step)
    tool_stages = stages if stages is not None and stages.tool else None
    obs = _Observers(observers)
    gate = approval or PermissionService()  # the one path: hard denials, then ask (denied: no prompter)
    ctx = LoopContext(session_id=session_id, turn=turn, messages=messages)
    specs = tools.specs()
    steps = 0
    free = 0
    final_text = ""
    try:
        if obs.start:
            await _notify(obs.start, "on_loop_start", ctx)
        while True:
            if aborted():
                yield await _end(obs, ctx, Complete(outcome="aborted", stop_reason="aborted", text=final_text))
                return
            if steps >= cfg.max_steps:
                yield await _end(obs, ctx, Complete(outcome="failed", stop_reason="max_turns", text=final_text))
                return
            steps += 1
            ctx.step = steps
            request = ModelRequest(
                messages=messages,
                tools=specs,
                model=model,
                session_id=session_id,
                turn=turn,
                step=steps,
                params=cfg.params,
            )
            if obs.attempt:
                await _notify(obs.attempt, "on_model_attempt", ctx, steps, None)
            texts: list[str] = []
            deltas: list[str] = []
            reasoning: list[str] = []
            calls: list[ToolCall] = []
            try:
                async for event in step(request):
                    if type(event) is TextDelta:
                        deltas.append(event.text)
                        if obs.delta:
                            await _notify(obs.delta, "on_delta", ctx, event)
                    elif type(event) is Text:
                        texts.append(event.text)
                        deltas.clear()
                    elif type(event) is ToolCall:
                        if event.source == "host":
                            # The provider cannot know where a tool comes from; the tool set does.
                            known = tools.get(event.name)
                            if known is not None and known.source != "host":
                                origin = f"{known.source}:{known.server}" if known.server else known.source
                                event = ToolCall(
                                    call_id=event.call_id, name=event.name, arguments=event.arguments, source=origin
                                )
                        calls.append(event)
                    elif type(event) is Reasoning:
                        reasoning.append(event.text)
                    elif type(event) is ReasoningDelta and obs.delta:
                        await _notify(obs.delta, "on_delta", ctx, event)
                    elif type(event) is Complete:
                        continue  # the loop, not the step, ends the turn
                    yield event
                    if aborted():
                        break
            except SeamlineError as exc:
                if obs.attempt:
                    await _notify(obs.attempt, "on_model_attempt", ctx, steps, exc)
                yield exc.to_event()
                yield await _end(obs, ctx, Complete(outcome="failed", stop_reason=exc.kind, text=final_text))
                return
            if deltas:
                # A step that streamed deltas without closing them into a text block.
                joined = "".join(deltas)
                texts.append(joined)
                yield Text(text=joined)
            if aborted():
                yield await _end(obs, ctx, Complete(outcome="aborted", stop_reason="aborted", text=final_text))
                return
            message = Message(role="assistant", content="".join(texts), tool_calls=calls, reasoning="".join(reasoning))
            if obs.response:
                iv = await _notify(obs.response, "on_response", ctx, message)
                if iv is not None:
                    if iv.action == "stop":
                        yield await _end(
                            obs,
                            ctx,
                            Complete(outcome=iv.outcome, stop_reason=iv.reason or "observer", text=message.content),
                        )
                        return
                    if iv.action == "retry":
                        continue
                    if iv.action == "replace" and iv.content is not None:
                        message.content = iv.content
                        yield Text(text=iv.content)
            messages.append(message)
            final_text = message.content
            if not calls:
                if obs.turn_end:
                    iv = await _notify(obs.turn_end, "on_turn_end", ctx, message)
                    if iv is not None and iv.action == "continue_free" and free < cfg.max_free_continues:
                        free += 1
                        steps -= 1
                        messages.append(Message(role="user", content=iv.content or ""))
                        continue
                    if iv is not None and iv.action == "retry":
                        messages.pop()
                        continue
                    if iv is not None and iv.action == "stop":
                        yield await _end(
                            obs, ctx, Complete(outcome=iv.outcome, stop_reason=iv.reason or "observer", text=final_text)
                        )
                        return
                yield await _end(obs, ctx, Complete(outcome="completed", stop_reason="end_turn", text=final_text))
                return
            async for event in _run_tools(calls, tools, gate, obs, ctx, messages, tool_stages):
                yield event
    except PermissionDenied as exc:
        yield exc.to_event()
        yield await _end(obs, ctx, Complete(outcome="failed", stop_reason="permission", text=final_text))
    except asyncio.CancelledError:
        if obs.cancelled:
            await _notify(obs.cancelled, "on_loop_cancelled", ctx)
        raise


async def _end(obs: _Observers, ctx: LoopContext, complete: Complete) -> Complete:
    if obs.end:
        await _notify(obs.end, "on_loop_end", ctx, complete.outcome)
    return complete


async def _run_tools(
    calls: list[ToolCall],
    tools: Toolset,
    gate: Approval,
    obs: _Observers,
    ctx: LoopContext,
    messages: list[Message],
    stages: StageChain | None = None,
) -> AsyncIterator[Event]:
    """Approve every call, run the allowed ones concurrently, report in call order.

    Only approved calls reach the tool stages."""
    before: list[list[Event]] = [[] for _ in calls]
    jobs: list[Awaitable[str] | None] = []
    results: list[ToolResult | None] = [None] * len(calls)
    buffers: list[list[Event]] = [[] for _ in calls]
    for i, call in enumerate(calls):
        arguments = call.arguments
        if obs.tool_call:
            iv = await _notify(obs.tool_call, "on_tool_call", ctx, call)
            if iv is not None:
                if iv.action == "stop":
                    results[i] = ToolResult(
                        call_id=call.call_id, output=f"stopped: {iv.reason}", is_error=True, name=call.name
                    )
                    jobs.append(None)
                    continue
                if iv.action == "replace":
                    if iv.arguments is not None:
                        arguments = iv.arguments
                    elif iv.content is not None:
                        results[i] = ToolResult(call_id=call.call_id, output=iv.content, name=call.name)
                        jobs.append(None)
                        continue
        found = tools.get(call.name)
        if found is None:
            known = ", ".join(tools.names()) or "none"
            results[i] = ToolResult(
                call_id=call.call_id,
                output=f"unknown tool {call.name!r}; available: {known}",
                is_error=True,
                name=call.name,
            )
            jobs.append(None)
            continue
        decision = await gate.decide(found, call)
        # A gate that reports its own permission events (request, decision) is trusted to.
        before[i].extend(decision.events)
        if not decision.allow:
            if not decision.events:
                before[i].append(PermissionDecision(request_id=call.call_id, decision="deny", reason=decision.reason))
            before[i].append(Error(kind="permission", message=decision.reason))
            results[i] = ToolResult(
                call_id=call.call_id, output=f"permission denied: {decision.reason}", is_error=True, name=call.name
            )
            jobs.append(None)
            continue
        tctx = ToolContext(
            call_id=call.call_id,
            session_id=ctx.session_id,
            turn_id=ctx.turn,
            emit=buffers[i].append,
            workspace=tools.workspace,
        )
        if stages is None:
            jobs.append(found.invoke(arguments, tctx))
        else:
            invocation = ToolInvocation(
                tool=found,
                call=call,
                arguments=dict(arguments),
                tool_class=found.tool_class,
                session_id=ctx.session_id,
                turn_id=ctx.turn,
                context=tctx,
            )
            jobs.append(stages.invoke_tool(invocation))
    outcomes = await _settle(jobs)
    for i, call in enumerate(calls):
        yield_events = before[i] + buffers[i]
        outcome = outcomes[i]
        result = results[i]
        if outcome is not None:
            value, exc = outcome
            if exc is None:
                result = ToolResult(call_id=call.call_id, output=value, name=call.name)
            elif isinstance(exc, SeamlineError):
                if exc.kind in ("sandbox", "permission", "timeout"):
                    yield_events.append(exc.to_event())
                result = ToolResult(
                    call_id=call.call_id, output=f"{exc.kind} error: {exc.message}", is_error=True, name=call.name
                )
            else:
                result = ToolResult(
                    call_id=call.call_id,
                    output=f"tool failed: {type(exc).__name__}: {exc}",
                    is_error=True,
                    name=call.name,
                )
        assert result is not None
        if obs.tool_result:
            iv = await _notify(obs.tool_result, "on_tool_result", ctx, call, result)
            if iv is not None and iv.action == "replace" and iv.content is not None:
                result = ToolResult(
                    call_id=result.call_id, output=iv.content, is_error=result.is_error, name=result.name
                )
        for event in yield_events:
            yield event
        yield result
        messages.append(
            Message(role="tool", content=result.output, call_id=call.call_id, name=call.name, is_error=result.is_error)
        )


async def _settle(jobs: list[Awaitable[str] | None]) -> list[tuple[str, BaseException | None] | None]:
    """Run the tool coroutines concurrently and collect each one's value or exception.

    A single call is awaited in place: no task, no wait set (the common case, and the
    hot path of a tool loop).
    """
    live = [j for j in jobs if j is not None]
    if len(live) == 1:
        only = live[0]
        try:
            single: tuple[str, BaseException | None] = (await only, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a tool's failure is reported to the model
            single = ("", exc)
        return [single if j is not None else None for j in jobs]
    tasks = [asyncio.ensure_future(j) if j is not None else None for j in jobs]
    running = [t for t in tasks if t is not None]
    if running:
        try:
            await asyncio.wait(running)
        except asyncio.CancelledError:
            for t in running:
                t.cancel()
            raise
    out: list[tuple[str, BaseException | None] | None] = []
    for task in tasks:
        if task is None:
            out.append(None)
        elif task.exception() is not None:
            out.append(("", task.exception()))
        else:
            out.append((task.result(), None))
    return out
