"""Stage chains: what an empty chat stage and an empty tool stage add per call.

Chat: a model call that streams 3 events, through 0 and through 8 pass-through chat
stages (each an async generator that re-yields every event, the shape a real stage has),
and through 8 stages that only hand the request on (a plain function returning the inner
iterator). Tool: one tool call through 0 and through 8 stages that only ``await next``.
The cost per stage is (time with 8 - time with 0) / 8, per call. A whole turn through the
loop with one of each is measured too. Every variant checks its own result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from seamline.events import Event, Text, TextDelta, ToolCall
from seamline.loop import Message, ModelRequest, run_agent_loop
from seamline.stages import StageChain, ToolInvocation, ToolInvoker
from seamline.tools import Toolset, tool
from seamline.tools.base import ToolContext

STAGES = 8


def _passthrough(inner):  # type: ignore[no-untyped-def]
    async def step(request: ModelRequest) -> AsyncIterator[Event]:
        async for event in inner(request):
            yield event

    return step


def _handoff(inner):  # type: ignore[no-untyped-def]
    def step(request: ModelRequest) -> AsyncIterator[Event]:
        return inner(request)

    return step


class _EmptyToolStage:
    async def invoke(self, invocation: ToolInvocation, next: ToolInvoker) -> str:
        return await next(invocation)


async def _model(request: ModelRequest) -> AsyncIterator[Event]:
    yield TextDelta(text="a")
    yield TextDelta(text="b")
    yield Text(text="ab")


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key


_REQUEST = ModelRequest(messages=[], tools=[], model=None, session_id="s", turn=1, step=1)


async def _chat_calls(chain: StageChain, n: int) -> float:
    step = chain.wrap_step(_model)
    started = time.perf_counter()
    for _ in range(n):
        count = 0
        async for _event in step(_REQUEST):
            count += 1
        assert count == 3
    return time.perf_counter() - started


async def _tool_calls(chain: StageChain, n: int) -> float:
    ctx = ToolContext(call_id="c", session_id="s", turn_id=1, emit=lambda e: None)
    call = ToolCall(call_id="c", name="lookup", arguments={"key": "k"})
    started = time.perf_counter()
    for _ in range(n):
        if chain.tool:
            invocation = ToolInvocation(
                tool=lookup,
                call=call,
                arguments={"key": "k"},
                tool_class="read",
                session_id="s",
                turn_id=1,
                context=ctx,
            )
            out = await chain.invoke_tool(invocation)
        else:
            out = await lookup.invoke({"key": "k"}, ctx)
        assert out == "k"
    return time.perf_counter() - started


def _script_step() -> Any:
    state = {"n": 0}

    async def step(request: ModelRequest) -> AsyncIterator[Event]:
        state["n"] += 1
        if state["n"] % 2:
            yield ToolCall(call_id=f"c{state['n']}", name="lookup", arguments={"key": "k"})
        else:
            yield Text(text="done")

    return step


async def _turns(chain: StageChain | None, n: int) -> float:
    tools = Toolset([lookup])
    started = time.perf_counter()
    for _ in range(n):
        last = None
        async for event in run_agent_loop(
            step=_script_step(),
            messages=[Message(role="user", content="go")],
            tools=tools,
            session_id="s",
            stages=chain,
        ):
            last = event
        assert last is not None and last.type == "complete" and last.text == "done"  # type: ignore[union-attr]
    return time.perf_counter() - started


def _median(fn: Any, reps: int) -> float:
    # The fastest repetition: the machine is shared, and noise only ever adds time.
    return min(asyncio.run(fn()) for _ in range(reps))


def run(*, quick: bool = False) -> dict[str, Any]:
    n = 2_000 if quick else 50_000
    turns = 200 if quick else 5_000
    reps = 3 if quick else 7
    none = StageChain()
    chat8 = StageChain(chat=[(100 + i, _passthrough) for i in range(STAGES)])
    hand8 = StageChain(chat=[(100 + i, _handoff) for i in range(STAGES)])
    tool1 = StageChain(tool=[(300, _EmptyToolStage())])
    tool8 = StageChain(tool=[(100 + i, _EmptyToolStage()) for i in range(STAGES)])
    both = StageChain(chat=[(300, _passthrough)], tool=[(300, _EmptyToolStage())])

    chat0 = _median(lambda: _chat_calls(none, n), reps)
    chat_pass = _median(lambda: _chat_calls(chat8, n), reps)
    chat_hand = _median(lambda: _chat_calls(hand8, n), reps)
    tool0 = _median(lambda: _tool_calls(none, n), reps)
    tool_one = _median(lambda: _tool_calls(tool1, n), reps)
    tool_eight = _median(lambda: _tool_calls(tool8, n), reps)
    turn0 = _median(lambda: _turns(None, turns), reps)
    turn1 = _median(lambda: _turns(both, turns), reps)
    us = 1e6
    return {
        "calls": n,
        "repetitions": reps,
        "model_call_no_stage_us": round(chat0 / n * us, 3),
        "empty_chat_stage_us_per_call": round((chat_pass - chat0) / n / STAGES * us, 3),
        "handoff_chat_stage_us_per_call": round((chat_hand - chat0) / n / STAGES * us, 3),
        "tool_call_no_stage_us": round(tool0 / n * us, 3),
        "first_tool_stage_us_per_call": round((tool_one - tool0) / n * us, 3),
        "empty_tool_stage_us_per_call": round((tool_eight - tool_one) / n / (STAGES - 1) * us, 3),
        "turn_no_stages_us": round(turn0 / turns * us, 2),
        "turn_one_chat_one_tool_stage_us": round(turn1 / turns * us, 2),
    }
