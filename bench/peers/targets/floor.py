"""The floor: a bare asyncio loop doing the same work as every framework, by hand.

An async model function per call (awaiting the scripted latency), a dict of tools, a
list of messages; the stream is an async generator handing each chunk to the reader.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

from harness import ANSWER, KEYS, PROMPT, RunOutcome, lookup_value

NAME = "floor"
VERSION = "python " + sys.version.split()[0]


async def _lookup(key: str) -> str:
    return lookup_value(key)


_TOOLS = {"lookup": _lookup}


async def _model(messages: list[dict[str, Any]], latency: float) -> dict[str, Any]:
    if latency:
        await asyncio.sleep(latency)
    done = sum(1 for m in messages if m["role"] == "tool")
    if done < len(KEYS):
        return {"role": "assistant", "tool_calls": [("lookup", {"key": KEYS[done]})]}
    return {"role": "assistant", "text": ANSWER}


async def tool_run(latency: float) -> RunOutcome:
    messages: list[dict[str, Any]] = [{"role": "user", "text": PROMPT}]
    calls = 0
    while True:
        reply = await _model(messages, latency)
        calls += 1
        messages.append(reply)
        if "tool_calls" not in reply:
            break
        for name, arguments in reply["tool_calls"]:
            messages.append({"role": "tool", "output": await _TOOLS[name](**arguments)})
    outputs = [m["output"] for m in messages if m["role"] == "tool"]
    return RunOutcome(answer=messages[-1]["text"], model_calls=calls, tool_outputs=outputs)


async def _deltas(chunks: Sequence[str]) -> AsyncIterator[str]:
    for chunk in chunks:
        yield chunk


async def stream_run(chunks: Sequence[str]) -> list[str]:
    seen: list[str] = []
    async for delta in _deltas(chunks):
        seen.append(delta)
    return seen
