"""openai-agents: ``Runner.run`` / ``Runner.run_streamed`` over a custom ``Model``.

The SDK's own ``agents.testing.ScriptedModel`` deep-copies every request it records (for
assertions), which would bill the test double to the framework; this ``Model`` answers by
step like the other targets and builds its output with the SDK's public helpers. Tracing
is off: by default the SDK exports traces to OpenAI over the network.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from importlib.metadata import version
from typing import Any

from agents import Agent, ModelSettings, Runner, Usage, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from harness import ANSWER, KEYS, PROMPT, RunOutcome, lookup_value
from openai.types.responses import Response, ResponseCompletedEvent, ResponseTextDeltaEvent

NAME = "openai-agents"
VERSION = version("openai-agents")

set_tracing_disabled(True)

_RUN: ContextVar[list[float]] = ContextVar("run")
_STREAM: ContextVar[Sequence[str]] = ContextVar("stream")


class BenchModel(Model):
    """Answers by step: five ``lookup`` calls, then the answer."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        run = _RUN.get()
        step = int(run[0])
        run[0] += 1
        if run[1]:
            await asyncio.sleep(run[1])
        usage = Usage(requests=1, input_tokens=10, output_tokens=2, total_tokens=12)
        if step < len(KEYS):
            item = function_call("lookup", {"key": KEYS[step]}, call_id=f"call-{step}")
        else:
            item = assistant_message(ANSWER)
        return ModelResponse(output=[item], usage=usage, response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        chunks = _STREAM.get()
        for i, chunk in enumerate(chunks):
            # model_construct: the wire event without re-validating it, as a parsed SSE chunk is
            yield ResponseTextDeltaEvent.model_construct(
                content_index=0,
                delta=chunk,
                item_id="msg",
                logprobs=[],
                output_index=0,
                sequence_number=i,
                type="response.output_text.delta",
            )
        response = Response(
            id="resp",
            created_at=0,
            model="bench",
            object="response",
            output=[assistant_message("".join(chunks), item_id="msg")],
            tool_choice="none",
            tools=[],
            top_p=None,
            parallel_tool_calls=False,
            status="completed",
        )
        yield ResponseCompletedEvent(response=response, sequence_number=len(chunks), type="response.completed")


@function_tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return lookup_value(key)


_agent = Agent(name="bench", model=BenchModel(), tools=[lookup], model_settings=ModelSettings())


async def tool_run(latency: float) -> RunOutcome:
    run = [0, latency]
    _RUN.set(run)
    result = await Runner.run(_agent, PROMPT)
    outputs = [str(item.output) for item in result.new_items if item.type == "tool_call_output_item"]
    return RunOutcome(answer=str(result.final_output), model_calls=int(run[0]), tool_outputs=outputs)


async def stream_run(chunks: Sequence[str]) -> list[str]:
    _STREAM.set(chunks)
    seen: list[str] = []
    result = Runner.run_streamed(_agent, PROMPT)
    async for event in result.stream_events():
        if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
            seen.append(event.data.delta)
    if result.final_output != "".join(chunks):
        return []  # the stream looked right but the run's answer did not: fail the check
    return seen
