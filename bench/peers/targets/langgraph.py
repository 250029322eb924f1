"""langgraph: its prebuilt ReAct agent (``create_react_agent``) over a fake chat model.

langchain-core's own fakes (``GenericFakeChatModel``) cannot bind tools and run their
async path in a thread, so the fake here is a small ``BaseChatModel`` with native async
``_agenerate`` / ``_astream`` that answers by step with real ``tool_calls``. The stream is
read through ``graph.astream(..., stream_mode="messages")``, langgraph's token stream.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from importlib.metadata import version
from typing import Any

from harness import ANSWER, KEYS, PROMPT, RunOutcome, lookup_value
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # create_react_agent is marked for a move to langchain.agents
    from langgraph.prebuilt import create_react_agent

NAME = "langgraph"
VERSION = version("langgraph")

_RUN: ContextVar[list[float]] = ContextVar("run")
_STREAM: ContextVar[Sequence[str]] = ContextVar("stream")
_USAGE = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}


class BenchChatModel(BaseChatModel):
    """Answers by step: five ``lookup`` tool calls, then the answer; streams ``_STREAM``."""

    @property
    def _llm_type(self) -> str:
        return "bench"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> BenchChatModel:  # type: ignore[override]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        raise NotImplementedError("the bench calls the async API only")

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        run = _RUN.get()
        step = int(run[0])
        run[0] += 1
        if run[1]:
            await asyncio.sleep(run[1])
        if step < len(KEYS):
            call = {"name": "lookup", "args": {"key": KEYS[step]}, "id": f"call-{step}", "type": "tool_call"}
            message = AIMessage(content="", tool_calls=[call], usage_metadata=_USAGE)
        else:
            message = AIMessage(content=ANSWER, usage_metadata=_USAGE)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in _STREAM.get():
            # BaseChatModel reports each chunk to langgraph's stream handler itself
            yield ChatGenerationChunk(message=AIMessageChunk(content=chunk))


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return lookup_value(key)


_graph = create_react_agent(BenchChatModel(), [lookup])


async def tool_run(latency: float) -> RunOutcome:
    run = [0, latency]
    _RUN.set(run)
    state = await _graph.ainvoke({"messages": [("user", PROMPT)]})
    messages = state["messages"]
    outputs = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
    return RunOutcome(answer=str(messages[-1].content), model_calls=int(run[0]), tool_outputs=outputs)


async def stream_run(chunks: Sequence[str]) -> list[str]:
    _STREAM.set(chunks)
    seen: list[str] = []
    async for message, _meta in _graph.astream({"messages": [("user", PROMPT)]}, stream_mode="messages"):
        if isinstance(message, AIMessageChunk) and message.content:
            seen.append(str(message.content))
    return seen
