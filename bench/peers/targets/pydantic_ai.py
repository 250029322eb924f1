"""pydantic-ai: ``Agent.run`` / ``Agent.run_stream`` over its public ``FunctionModel``.

The model function answers by the step it is at (counted per run through a context
variable) and reports its usage, so pydantic-ai does not estimate tokens for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from importlib.metadata import version

from harness import ANSWER, KEYS, PROMPT, RunOutcome, lookup_value
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

NAME = "pydantic-ai"
VERSION = version("pydantic-ai-slim")

# [model calls so far, latency] of the run in this task
_RUN: ContextVar[list[float]] = ContextVar("run")
_STREAM: ContextVar[Sequence[str]] = ContextVar("stream")


async def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    run = _RUN.get()
    step = int(run[0])
    run[0] += 1
    if run[1]:
        await asyncio.sleep(run[1])
    usage = RequestUsage(input_tokens=10, output_tokens=2)
    if step < len(KEYS):
        call = ToolCallPart(tool_name="lookup", args={"key": KEYS[step]}, tool_call_id=f"call-{step}")
        return ModelResponse(parts=[call], usage=usage)
    return ModelResponse(parts=[TextPart(ANSWER)], usage=usage)


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    for chunk in _STREAM.get():
        yield chunk


async def lookup(key: str) -> str:
    """Look a key up."""
    return lookup_value(key)


_agent = Agent(FunctionModel(_model, stream_function=_stream), tools=[lookup], name="bench")


async def tool_run(latency: float) -> RunOutcome:
    run = [0, latency]
    _RUN.set(run)
    result = await _agent.run(PROMPT)
    outputs = [
        str(part.content)
        for message in result.all_messages()
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    return RunOutcome(answer=str(result.output), model_calls=int(run[0]), tool_outputs=outputs)


async def stream_run(chunks: Sequence[str]) -> list[str]:
    _STREAM.set(chunks)
    seen: list[str] = []
    async with _agent.run_stream(PROMPT) as result:
        # debounce_by=None: every delta as it comes, not grouped by 100 ms
        async for delta in result.stream_text(delta=True, debounce_by=None):
            seen.append(delta)
    return seen
