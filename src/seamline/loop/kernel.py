"""The agent loop kernel: model call, tool calls, observers, until the model answers.

The kernel knows no provider: it calls a *step* function that streams the events of one
model call. It never raises for a failure of the run: every turn ends with exactly one
``complete`` event, failures before it as classified ``error`` events.

It knows no stage either: it takes anything shaped like :class:`LoopStages` (see
:mod:`seamline.stages` for the chain that is).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final

from seamline.errors import InvalidRequest, PermissionDenied, SeamlineError
from seamline.events import Complete, Event, Reasoning, ReasoningDelta, Text, TextDelta, ToolCall, Usage
from seamline.loop.messages import Message, ModelRequest
from seamline.loop.observer_calls import ObserverGroups, notify
from seamline.loop.observers import LoopContext, Observer
from seamline.loop.stage_protocol import LoopStages
from seamline.loop.tool_calls import replaced_result, reported, run_calls, tool_message
from seamline.tools.approval import Approval
from seamline.tools.base import Toolset, ToolSpec
from seamline.tools.permissions import PermissionService

__all__ = ["LoopConfig", "StepFunction", "StepInterrupt", "run_agent_loop"]

_DELTAS: Final = (TextDelta, ReasoningDelta)  # what `on_delta` observers are told of

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


class StepInterrupt:
    """Lets an abort reach a model call that is waiting (a stalled stream, an endpoint that
    never answers): :meth:`interrupt` cancels the turn's task while, and only while, it
    waits for the model's next event; the loop takes that cancel back and ends the turn
    ``aborted`` with what streamed. Outside that wait it only leaves the abort flag."""

    __slots__ = ("requested", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None  # set only while waiting for the model
        self.requested = False

    def interrupt(self) -> None:
        task = self.task
        if task is not None and not self.requested:
            self.requested = True
            task.cancel("seamline: the turn was aborted")

    def take_back(self) -> bool:
        """After a cancel arrived in the wait: True when it was ours alone (then undone)."""
        if not self.requested or self.task is None:
            return False
        self.requested = False
        return self.task.uncancel() == 0  # another cancel too (SIGTERM, a second Ctrl-C): keep it


def run_agent_loop(
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
    stages: LoopStages | None = None,
    interrupt: StepInterrupt | None = None,
    carried: Sequence[ToolCall] = (),
    pause: Callable[[], bool] | None = None,
) -> AsyncIterator[Event]:
    """Run one turn. ``messages`` already ends with the user's prompt and is extended in place.

    ``carried``: a turn taken up again (its server died while a call waited for approval):
    the calls of its last step that have no result yet, approved and run before the next
    model call; ``messages`` then ends with the assistant message that holds them.

    ``stages``: chat stages wrap every model call, tool stages every approved tool call,
    in slot order (see :mod:`seamline.stages`). Without stages nothing is wrapped.
    ``interrupt``: lets an abort stop a model call that is waiting (see :class:`StepInterrupt`).
    ``pause``: asked before each model call; True ends the turn ``budget`` with stop reason
    ``paused`` there (a request boundary), with ``messages`` ready to go on from.
    Nothing runs until the first event is asked for.
    """
    return _Turn(
        step=step,
        messages=messages,
        tools=tools,
        context=LoopContext(session_id=session_id, turn=turn, messages=messages),
        model=model,
        observers=observers,
        approval=approval,
        config=config,
        aborted=aborted,
        stages=stages,
        interrupt=interrupt,
        carried=carried,
        pause=pause,
    ).events()


class _Next(enum.Enum):
    # Back to the top of the turn: call the model again (an observer's retry or free
    # continue), or end the turn when its end is decided (``_Turn.ending``).
    AGAIN = "again"


class _Answer:
    """What one model call said, as it streamed: text, reasoning and tool calls."""

    __slots__ = ("calls", "deltas", "message", "reasoning", "texts")

    def __init__(self) -> None:
        # texts and reasoning are rare beside deltas and calls: a tuple until one comes (a
        # model call in flight holds fewer objects for the collector to scan)
        self.texts: list[str] | tuple[()] = ()
        self.deltas: list[str] = []
        self.reasoning: list[str] | tuple[()] = ()
        self.calls: list[ToolCall] = []
        self.message: Message | None = None

    def close_text(self) -> Text:
        """A step that streamed deltas without closing them into a text block."""
        joined = "".join(self.deltas)
        self.texts = [*self.texts, joined]
        return Text(text=joined)

    def add_call(self, event: ToolCall, tools: Toolset) -> ToolCall:
        if event.source == "host":
            # The provider cannot know where a tool comes from; the tool set does.
            known = tools.get(event.name)
            if known is not None and known.source != "host":
                origin = f"{known.source}:{known.server}" if known.server else known.source
                event = ToolCall(call_id=event.call_id, name=event.name, arguments=event.arguments, source=origin)
        self.calls.append(event)
        return event


class _Turn:
    """One turn of the loop: its state between model calls, and each decision in it.

    :meth:`events` is the turn's one generator, each step's tool calls included: a nested
    generator per step costs asyncio's hooks on every model call, and one left suspended
    at ``complete`` holds the whole turn until the event loop gets round to closing it."""

    __slots__ = (
        "aborted",
        "approval",
        "carried",
        "cfg",
        "config",
        "ctx",
        "ending",
        "free",
        "gate",
        "interrupt",
        "messages",
        "model",
        "obs",
        "observers",
        "pause",
        "specs",
        "stages",
        "step",
        "steps",
        "text",
        "tool_stages",
        "tools",
        "waits",
    )

    def __init__(
        self,
        *,
        step: StepFunction,
        messages: list[Message],
        tools: Toolset,
        context: LoopContext,
        model: str | None,
        observers: Sequence[Observer],
        approval: Approval | None,
        config: LoopConfig | None,
        aborted: Callable[[], bool],
        stages: LoopStages | None,
        interrupt: StepInterrupt | None = None,
        carried: Sequence[ToolCall] = (),
        pause: Callable[[], bool] | None = None,
    ) -> None:
        self.carried = carried
        self.pause = pause
        self.step, self.messages, self.tools, self.ctx, self.model = step, messages, tools, context, model
        self.observers, self.approval, self.config, self.aborted = observers, approval, config, aborted
        self.stages = stages
        self.interrupt = interrupt
        self.ending: Complete | None = None
        self.steps = 0
        self.free = 0
        self.text = ""

    def _prepare(self) -> tuple[ObserverGroups, LoopContext, Callable[[], bool], StepInterrupt]:
        """What the turn's generator keeps at hand. Done on the first event, not when the turn
        is made: a turn never iterated costs nothing."""
        self.cfg = self.config or LoopConfig()
        stages = self.stages
        if stages is not None and stages.chat:
            self.step = stages.wrap_step(self.step)
        self.tool_stages = stages if stages is not None and stages.tool else None
        self.obs = ObserverGroups(self.observers)
        self.gate = self.approval or PermissionService()  # the one path: hard denials, then ask
        self.specs: list[ToolSpec] = self.tools.specs()
        self.waits = self.interrupt or StepInterrupt()
        return self.obs, self.ctx, self.aborted, self.waits

    async def events(self) -> AsyncIterator[Event]:
        """The turn's events; the last one is its only ``complete``."""
        obs, ctx, aborted, waits = self._prepare()
        event: Event | None
        try:
            for event in await self._start():
                yield event
            while not isinstance(request := await self._next_request(), Complete):
                try:
                    answer, task, model_events = _Answer(), asyncio.current_task(), self.step(request)
                    try:
                        waits.task = task  # set only while the model's next event is awaited
                        async for event in model_events:
                            waits.task = None
                            if type(event) is TextDelta:  # the hot path of a stream
                                answer.deltas.append(event.text)
                            elif type(event) is not Usage:  # a usage figure passes as it is
                                event = self._take(event, answer)
                            if event is not None:
                                if obs.delta and type(event) in _DELTAS:
                                    await notify(obs.delta, "on_delta", ctx, event)
                                yield event
                                if aborted():
                                    break
                            waits.task = task
                    except asyncio.CancelledError:
                        if not waits.take_back():
                            raise  # not (only) our abort; ours ends the call with what streamed
                    finally:
                        waits.task = None
                except SeamlineError as exc:
                    self.ending = await self._model_failed(exc)
                    yield exc.to_event()
                    continue
                if answer.deltas:
                    yield answer.close_text()
                verdict = await self._respond(answer) if obs.response else self._review(answer)
                if verdict is _Next.AGAIN:
                    continue  # asked again, or the turn's end is decided (self.ending)
                if verdict is not None:
                    yield verdict  # an observer's replacement text
                if not (message := self._accept(answer)).tool_calls:
                    await self._turn_end(message)  # the turn ends, unless an observer asks again
                    continue
                for plan, outcome in await run_calls(answer.calls, self.tools, self.gate, obs, ctx, self.tool_stages):
                    before, result = reported(plan, outcome)
                    if obs.tool_result:
                        result = await replaced_result(obs.tool_result, ctx, plan.call, result)
                    for event in before:
                        yield event
                    yield result
                    self.messages.append(tool_message(plan.call, result))
            yield await self._end(request)
        except PermissionDenied as exc:
            yield exc.to_event()
            yield await self._end(Complete(outcome="failed", stop_reason="permission", text=self.text))
        except asyncio.CancelledError:
            if obs.cancelled:
                await notify(obs.cancelled, "on_loop_cancelled", ctx)
            raise

    async def _start(self) -> Sequence[Event]:
        """Observers told of the start; a turn taken up again (``carried``) then runs its
        calls that have no result yet: their events."""
        obs, ctx = self.obs, self.ctx
        if obs.start:
            await notify(obs.start, "on_loop_start", ctx)
        if not self.carried:
            return ()
        events: list[Event] = []
        for plan, outcome in await run_calls(list(self.carried), self.tools, self.gate, obs, ctx, self.tool_stages):
            before, result = reported(plan, outcome)
            if obs.tool_result:
                result = await replaced_result(obs.tool_result, ctx, plan.call, result)
            events += before
            events.append(result)
            self.messages.append(tool_message(plan.call, result))
        return events

    async def _next_request(self) -> ModelRequest | Complete:
        """The next model call (its attempt told to observers), or the ``complete`` that comes
        first: the turn's end already decided, an abort, no steps left."""
        if self.ending is not None:
            return self.ending
        if self.aborted():
            return Complete(outcome="aborted", stop_reason="aborted", text=self.text)
        if self.pause is not None and self.pause():
            return Complete(outcome="budget", stop_reason="paused", text=self.text)
        if self.steps >= self.cfg.max_steps:
            return Complete(outcome="failed", stop_reason="max_turns", text=self.text)
        self.steps += 1
        ctx = self.ctx
        ctx.step = self.steps
        request = ModelRequest(
            messages=self.messages,
            tools=self.specs,
            model=self.model,
            session_id=ctx.session_id,
            turn=ctx.turn,
            step=self.steps,
            params=self.cfg.params,
        )
        if self.obs.attempt:
            await notify(self.obs.attempt, "on_model_attempt", ctx, self.steps, None)
        return request

    def _take(self, event: Event, answer: _Answer) -> Event | None:
        """Note an event of the model call (other than a delta); ``None`` drops it."""
        if type(event) is Text:
            answer.texts = [*answer.texts, event.text]
            answer.deltas.clear()
        elif type(event) is ToolCall:
            return answer.add_call(event, self.tools)
        elif type(event) is Reasoning:
            answer.reasoning = [*answer.reasoning, event.text]
        elif type(event) is Complete:
            return None  # the loop, not the step, ends the turn
        return event

    async def _model_failed(self, exc: SeamlineError) -> Complete:
        if self.obs.attempt:
            await notify(self.obs.attempt, "on_model_attempt", self.ctx, self.steps, exc)
        # A model request refused because the turn's budget is spent (the model gateway's
        # check) ends the turn as a passed budget does, not as a failure.
        return Complete(outcome="budget" if exc.kind == "budget" else "failed", stop_reason=exc.kind, text=self.text)

    def _review(self, answer: _Answer) -> _Next | None:
        """The model call is over: its message, unless the turn was aborted meanwhile (then
        the turn's end is decided)."""
        if self.aborted():
            # What this model call streamed before the abort is the turn's last word.
            partial = "".join(answer.texts) or "".join(answer.deltas)
            self.ending = Complete(outcome="aborted", stop_reason="aborted", text=partial or self.text)
            return _Next.AGAIN
        answer.message = Message(
            role="assistant",
            content="".join(answer.texts),
            tool_calls=answer.calls,
            reasoning="".join(answer.reasoning),
        )
        return None

    async def _respond(self, answer: _Answer) -> Text | _Next | None:
        """As :meth:`_review`, then ``on_response`` observers may stop the turn, ask again, or
        replace the text (the replacement is returned)."""
        aborted = self._review(answer)
        message = answer.message
        if aborted is not None or message is None:
            return aborted
        iv = await notify(self.obs.response, "on_response", self.ctx, message)
        if iv is None:
            return None
        if iv.action == "stop":
            self.ending = Complete(outcome=iv.outcome, stop_reason=iv.reason or "observer", text=message.content)
            return _Next.AGAIN
        if iv.action == "retry":
            return _Next.AGAIN
        if iv.action == "replace" and iv.content is not None:
            message.content = iv.content
            return Text(text=iv.content)
        return None

    def _accept(self, answer: _Answer) -> Message:
        message = answer.message
        assert message is not None
        self.messages.append(message)
        self.text = message.content
        return message

    async def _turn_end(self, message: Message) -> None:
        """The model asked for no tool: the turn's end is decided, unless an ``on_turn_end``
        observer continues it for free or retries the call; or it stops it its own way."""
        iv = await notify(self.obs.turn_end, "on_turn_end", self.ctx, message) if self.obs.turn_end else None
        if iv is not None and iv.action == "continue_free" and self.free < self.cfg.max_free_continues:
            self.free += 1
            self.steps -= 1
            self.messages.append(Message(role="user", content=iv.content or ""))
        elif iv is not None and iv.action == "retry":
            self.messages.pop()
        elif iv is not None and iv.action == "stop":
            self.ending = Complete(outcome=iv.outcome, stop_reason=iv.reason or "observer", text=self.text)
        else:
            self.ending = Complete(outcome="completed", stop_reason="end_turn", text=self.text)

    async def _end(self, complete: Complete) -> Complete:
        if self.obs.end:
            await notify(self.obs.end, "on_loop_end", self.ctx, complete.outcome)
        return complete
