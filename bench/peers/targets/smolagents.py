"""smolagents: ``ToolCallingAgent.run`` over a custom ``Model``.

smolagents has no asyncio API, so it sits out W2 (concurrency) and runs W1 and W3 through
its synchronous ``run``. Its answer is a call to its ``final_answer`` tool, so the sixth
model call is that call. Logging is off (``LogLevel.OFF``); streaming renders through
rich's ``Live`` as smolagents always does when ``stream_outputs`` is on.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Sequence
from importlib.metadata import version
from typing import Any

from harness import ANSWER, KEYS, PROMPT, RunOutcome, lookup_value
from smolagents import ToolCallingAgent, tool
from smolagents.memory import ActionStep
from smolagents.models import (
    ChatMessage,
    ChatMessageStreamDelta,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    ChatMessageToolCallStreamDelta,
    MessageRole,
    Model,
)
from smolagents.monitoring import LogLevel, TokenUsage

NAME = "smolagents"
VERSION = version("smolagents")
CONCURRENT = False

_run = {"calls": 0}
_stream: dict[str, Sequence[str]] = {"chunks": ()}


def _call(name: str, arguments: dict[str, Any], call_id: str) -> ChatMessageToolCall:
    return ChatMessageToolCall(
        function=ChatMessageToolCallFunction(name=name, arguments=arguments), id=call_id, type="function"
    )


class BenchModel(Model):
    """Answers by step: five ``lookup`` calls, then ``final_answer``; streams ``_stream``."""

    def generate(self, messages: list[ChatMessage], *args: Any, **kwargs: Any) -> ChatMessage:
        step = _run["calls"]
        _run["calls"] += 1
        usage = TokenUsage(input_tokens=10, output_tokens=2)
        if step < len(KEYS):
            calls = [_call("lookup", {"key": KEYS[step]}, f"call-{step}")]
        else:
            calls = [_call("final_answer", {"answer": ANSWER}, f"call-{step}")]
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=calls, token_usage=usage)

    def generate_stream(self, messages: list[ChatMessage], *args: Any, **kwargs: Any) -> Generator[Any]:
        chunks = _stream["chunks"]
        for chunk in chunks:
            yield ChatMessageStreamDelta(content=chunk)
        function = ChatMessageToolCallFunction(name="final_answer", arguments=json.dumps({"answer": "".join(chunks)}))
        yield ChatMessageStreamDelta(
            tool_calls=[ChatMessageToolCallStreamDelta(index=0, id="call-final", type="function", function=function)],
            token_usage=TokenUsage(input_tokens=10, output_tokens=len(chunks)),
        )


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key to look up
    """
    return lookup_value(key)


_agent = ToolCallingAgent(tools=[lookup], model=BenchModel(), verbosity_level=LogLevel.OFF)
_streaming = ToolCallingAgent(tools=[lookup], model=BenchModel(), verbosity_level=LogLevel.OFF, stream_outputs=True)


def tool_run(latency: float) -> RunOutcome:
    if latency:
        raise ValueError("smolagents has no asyncio API; W2 leaves it out")
    _run["calls"] = 0
    answer = _agent.run(PROMPT)
    outputs = [
        str(step.observations)
        for step in _agent.memory.steps
        if isinstance(step, ActionStep) and step.tool_calls and step.tool_calls[0].name == "lookup"
    ]
    return RunOutcome(answer=str(answer), model_calls=_run["calls"], tool_outputs=outputs)


def stream_run(chunks: Sequence[str]) -> list[str]:
    _stream["chunks"] = chunks
    seen: list[str] = []
    answer = None
    for event in _streaming.run(PROMPT, stream=True):
        if isinstance(event, ChatMessageStreamDelta) and event.content:
            seen.append(event.content)
        elif type(event).__name__ == "FinalAnswerStep":
            answer = event.output
    if answer != "".join(chunks):
        return []  # the deltas arrived but the run's answer did not: fail the check
    return seen
