"""Concurrent tool calls: a cancelled step returns only once every call has ended."""

from __future__ import annotations

import asyncio

from seamline.loop.tool_calls import settle


def test_a_cancelled_step_waits_for_each_call_to_end_what_it_started() -> None:
    """Each call's cancel path (killing its process group, say) awaits something; the
    cancel reaches the caller only after every one of them finished."""
    ended: list[int] = []
    started = asyncio.Event()

    async def call(n: int) -> str:
        try:
            started.set()
            await asyncio.sleep(1000)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # ending what it started takes a moment
            ended.append(n)
            raise
        return "never"

    async def scenario() -> list[int]:
        step = asyncio.ensure_future(settle([call(1), None, call(2)]))
        await started.wait()
        step.cancel()
        try:
            await step
        except asyncio.CancelledError:
            return sorted(ended)
        raise AssertionError("the step was not cancelled")

    assert asyncio.run(scenario()) == [1, 2]
