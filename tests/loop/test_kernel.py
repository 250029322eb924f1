"""The agent loop: tools from typed functions, parallel calls, limits, observers, abort."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest

from seamline.events import Complete, Error, Event, PermissionDecision, Text, ToolCall, ToolResult
from seamline.loop.messages import Message, ModelRequest
from seamline.loop.observers import Intervention, LoopContext, Observer
from seamline.providers.base import Provider
from seamline.testing import scripted
from seamline.tools import Toolset, tool
from seamline.tools.approval import YesApproval


def run_turn(
    provider: Provider,
    tools: Toolset,
    *,
    observers: tuple[Observer, ...] = (),
    yes: bool = False,
    max_steps: int = 50,
    prompt: str = "go",
) -> list[Event]:
    async def go() -> list[Event]:
        session = await provider.open(tools=tools, observers=observers, approval=YesApproval(yes=yes))
        return [e async for e in session.send(prompt, max_steps=max_steps)]

    return asyncio.run(go())


@tool
def add(a: int, b: int = 2) -> str:
    """Add two integers."""
    return str(a + b)


def results(events: list[Event]) -> list[ToolResult]:
    return [e for e in events if isinstance(e, ToolResult)]


def final(events: list[Event]) -> Complete:
    assert isinstance(events[-1], Complete)
    assert sum(isinstance(e, Complete) for e in events) == 1
    return events[-1]


def test_schema_comes_from_the_signature() -> None:
    assert add.parameters["properties"]["a"] == {"type": "integer"}
    assert add.parameters["properties"]["b"]["default"] == 2
    assert add.parameters["required"] == ["a"]
    assert add.description == "Add two integers."


def test_tool_result_goes_back_to_the_model() -> None:
    provider = scripted([{"tool_calls": [{"name": "add", "arguments": {"a": 40}}]}, {"text": "42"}])
    events = run_turn(provider, Toolset([add]))
    assert [r.output for r in results(events)] == ["42"]
    assert final(events).text == "42"


def test_invalid_arguments_become_a_tool_error_not_a_crash() -> None:
    seen: list[Message] = []

    class Spy(Observer):
        async def on_response(self, ctx: LoopContext, message: Message) -> None:
            seen.extend(m for m in ctx.messages if m.role == "tool")

    provider = scripted(
        [
            {"tool_calls": [{"name": "add", "arguments": {"a": "not a number"}}]},
            {"tool_calls": [{"name": "add", "arguments": {"a": 1, "zzz": 3}}]},
            {"tool_calls": [{"name": "nope", "arguments": {}}]},
            {"text": "gave up"},
        ]
    )
    events = run_turn(provider, Toolset([add]), observers=(Spy(),))
    outs = results(events)
    assert all(r.is_error for r in outs)
    assert "invalid arguments for add" in outs[0].output and "Expected `int`" in outs[0].output
    assert "zzz" in outs[1].output
    assert "unknown tool 'nope'" in outs[2].output
    assert final(events).outcome == "completed"
    assert any(m.is_error and "invalid arguments" in m.content for m in seen)


def test_parallel_tool_calls_run_concurrently() -> None:
    """Each call waits until the other has started: only concurrent execution finishes."""
    started: dict[str, asyncio.Event] = {}

    @tool
    async def meet(me: str, other: str) -> str:
        """Wait for the other call."""
        started.setdefault(me, asyncio.Event()).set()
        await asyncio.wait_for(started.setdefault(other, asyncio.Event()).wait(), timeout=60)
        return f"{me} met {other}"

    provider = scripted(
        [
            {
                "tool_calls": [
                    {"name": "meet", "arguments": {"me": "a", "other": "b"}},
                    {"name": "meet", "arguments": {"me": "b", "other": "a"}},
                ]
            },
            {"text": "both met"},
        ]
    )
    events = run_turn(provider, Toolset([meet]))
    assert [r.output for r in results(events)] == ["a met b", "b met a"]
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [r.call_id for r in results(events)] == [c.call_id for c in calls]


def test_turn_limit() -> None:
    loop_forever = [{"tool_calls": [{"name": "add", "arguments": {"a": i}}]} for i in range(10)]
    events = run_turn(scripted(loop_forever), Toolset([add]), max_steps=3)
    done = final(events)
    assert (done.outcome, done.stop_reason) == ("failed", "max_turns")
    assert len(results(events)) == 3


def test_write_tools_need_yes() -> None:
    @tool(tool_class="write")
    def touch(name: str) -> str:
        """Pretend to write."""
        return f"wrote {name}"

    script = [{"tool_calls": [{"name": "touch", "arguments": {"name": "x"}}]}, {"text": "ok"}]
    denied = run_turn(scripted(script), Toolset([touch]))
    assert results(denied)[0].is_error and "--yes" in results(denied)[0].output
    assert any(isinstance(e, PermissionDecision) and e.decision == "deny" for e in denied)
    assert any(isinstance(e, Error) and e.kind == "permission" for e in denied)
    allowed = run_turn(scripted(script), Toolset([touch]), yes=True)
    assert results(allowed)[0].output == "wrote x"


class Recorder(Observer):
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def on_loop_start(self, ctx: LoopContext) -> None:
        self.calls.append("loop_start")

    async def on_model_attempt(self, ctx: LoopContext, attempt: int, error: Exception | None) -> None:
        self.calls.append(f"attempt{attempt}")

    async def on_response(self, ctx: LoopContext, message: Message) -> None:
        self.calls.append("response")

    async def on_tool_call(self, ctx: LoopContext, call: ToolCall) -> None:
        self.calls.append(f"tool_call:{call.name}")

    async def on_tool_result(self, ctx: LoopContext, call: ToolCall, result: ToolResult) -> None:
        self.calls.append(f"tool_result:{result.output}")

    async def on_turn_end(self, ctx: LoopContext, message: Message) -> None:
        self.calls.append("turn_end")

    async def on_loop_end(self, ctx: LoopContext, outcome: str) -> None:
        self.calls.append(f"loop_end:{outcome}")


def test_observer_callback_order() -> None:
    rec = Recorder()
    provider = scripted([{"tool_calls": [{"name": "add", "arguments": {"a": 1}}]}, {"text": "3"}])
    run_turn(provider, Toolset([add]), observers=(rec,))
    assert rec.calls == [
        "loop_start",
        "attempt1",
        "response",
        "tool_call:add",
        "tool_result:3",
        "attempt2",
        "response",
        "turn_end",
        "loop_end:completed",
    ]


def test_interventions_stop_retry_replace_continue() -> None:
    class Stopper(Observer):
        async def on_tool_call(self, ctx: LoopContext, call: ToolCall) -> Intervention:
            return Intervention.stop("no tools today")

    events = run_turn(
        scripted([{"tool_calls": [{"name": "add", "arguments": {"a": 1}}]}, {"text": "x"}]),
        Toolset([add]),
        observers=(Stopper(),),
    )
    assert results(events)[0].is_error and "no tools today" in results(events)[0].output

    class RetryOnce(Observer):
        retried = False

        async def on_response(self, ctx: LoopContext, message: Message) -> Intervention | None:
            if not RetryOnce.retried:
                RetryOnce.retried = True
                return Intervention.retry("bad first answer")
            return None

    events = run_turn(scripted([{"text": "first"}, {"text": "second"}]), Toolset(), observers=(RetryOnce(),))
    assert final(events).text == "second"

    class Replace(Observer):
        async def on_tool_result(self, ctx: LoopContext, call: ToolCall, result: ToolResult) -> Intervention:
            return Intervention.replace("[redacted]")

    events = run_turn(
        scripted([{"tool_calls": [{"name": "add", "arguments": {"a": 1}}]}, {"text": "ok"}]),
        Toolset([add]),
        observers=(Replace(),),
    )
    assert results(events)[0].output == "[redacted]"

    class Nudge(Observer):
        nudged = 0

        async def on_turn_end(self, ctx: LoopContext, message: Message) -> Intervention | None:
            if Nudge.nudged == 0:
                Nudge.nudged += 1
                return Intervention.continue_free("are you sure?")
            return None

    # max_steps=1: the nudge must not spend a step, or the second answer would hit the limit
    events = run_turn(scripted([{"text": "maybe"}, {"text": "sure"}]), Toolset(), observers=(Nudge(),), max_steps=1)
    assert (final(events).outcome, final(events).text) == ("completed", "sure")


def test_authorizing_observer_that_raises_fails_closed() -> None:
    ran: list[int] = []

    @tool
    def effect(n: int) -> str:
        """Record a side effect."""
        ran.append(n)
        return "done"

    class BrokenAuth(Observer):
        authorizes = True

        async def on_tool_call(self, ctx: LoopContext, call: ToolCall) -> None:
            raise RuntimeError("policy service down")

    class BrokenTelemetry(Observer):
        async def on_tool_call(self, ctx: LoopContext, call: ToolCall) -> None:
            raise RuntimeError("metrics down")

    script = [{"tool_calls": [{"name": "effect", "arguments": {"n": 1}}]}, {"text": "ok"}]
    events = run_turn(scripted(script), Toolset([effect]), observers=(BrokenAuth(),))
    assert ran == []
    assert final(events).outcome == "failed"
    assert any(isinstance(e, Error) and e.kind == "permission" and "policy service down" in e.message for e in events)
    events = run_turn(scripted(script), Toolset([effect]), observers=(BrokenTelemetry(),))
    assert ran == [1] and final(events).outcome == "completed"


class Slow(Provider):
    name: ClassVar[str] = "slow"
    real = False

    async def _gen(self, request: ModelRequest) -> AsyncIterator[Event]:
        yield Text(text="thinking")
        await asyncio.sleep(0.05)
        yield ToolCall(call_id=f"c{request.step}", name="add", arguments={"a": 1})

    def _step(self, request: ModelRequest) -> AsyncIterator[Event]:
        return self._gen(request)


def test_a_model_call_refused_for_the_budget_ends_the_turn_budget_not_failed() -> None:
    """A step that fails with kind ``budget`` (the model gateway refused the request: the
    turn's budget is spent) ends the turn as a passed budget does."""
    script = [{"tool_calls": [{"name": "add", "arguments": {"a": 1}}]}, {"error": {"kind": "budget"}}]
    events = run_turn(scripted(script), Toolset([add]))
    done = final(events)
    assert (done.outcome, done.stop_reason) == ("budget", "budget")
    assert [e.kind for e in events if isinstance(e, Error)] == ["budget"]
    assert results(events)[0].output == "3"  # what ran before stays


def test_abort_ends_with_outcome_aborted() -> None:
    async def go() -> list[Event]:
        provider = Slow()
        session = await provider.open(tools=Toolset([add]))
        events: list[Event] = []
        async for event in session.send("go"):
            events.append(event)
            if isinstance(event, ToolResult):
                await provider.abort(session)
        return events

    events = asyncio.run(go())
    done = final(events)
    assert (done.outcome, done.stop_reason) == ("aborted", "aborted")


def test_task_cancellation_marks_the_session(tmp_path: Any) -> None:
    from seamline.sessions.sqlite_store import SQLiteStore

    store = SQLiteStore(tmp_path / "s.db")

    async def go() -> str:
        provider = Slow()
        session = await provider.open(tools=Toolset([add]), store=store)

        async def consume() -> None:
            async for _ in session.send("go"):
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return session.session_id

    sid = asyncio.run(go())
    assert store.get(sid).status == "aborted"  # type: ignore[union-attr]
    assert any("thinking" in r.payload for r in store.raw_rows(sid))


def test_a_finished_turn_leaves_no_generator_for_the_event_loop_to_close() -> None:
    """A generator left suspended when the consumer stops at ``complete`` is closed later,
    by a task the event loop makes, and holds the whole turn until then."""
    finalized: list[str] = []

    async def go() -> list[Event]:
        firstiter, finalizer = sys.get_asyncgen_hooks()

        def record(agen: Any) -> None:  # an async generator
            finalized.append(agen.__qualname__)
            if finalizer is not None:
                finalizer(agen)

        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=record)
        try:
            provider = scripted([{"tool_calls": [{"name": "add", "arguments": {"a": 1}}]}, {"text": "3"}])
            session = await provider.open(tools=Toolset([add]), approval=YesApproval())
            events = [e async for e in session.send("go")]
            await provider.close(session)
            del session, provider
            gc.collect()
            return events
        finally:
            sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)

    assert final(asyncio.run(go())).text == "3"
    assert finalized == []
