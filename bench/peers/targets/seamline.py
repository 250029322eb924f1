"""seamline: the scripted provider through ``ProviderSession.send``, with the SQLite store on.

A fresh scripted provider per run (its script position is the run's state), one session
per run in the shared store, closed at the end as ``seamline.stream`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import ANSWER, KEYS, PROMPT, RunOutcome, lookup_value

import seamline as _seamline
from seamline.events import Complete, TextDelta, ToolResult
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.testing import scripted
from seamline.tools import Toolset, tool

NAME = "seamline"
VERSION = _seamline.__version__

_store: SQLiteStore | None = None


def setup(workdir: Path) -> None:
    global _store
    _store = SQLiteStore(workdir / "bench.db")


def teardown() -> None:
    if _store is not None:
        _store.close()


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return lookup_value(key)


_TOOLS = Toolset([lookup])


def _script(latency: float) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [
        {
            "tool_calls": [{"name": "lookup", "arguments": {"key": key}}],
            "usage": {"input_tokens": 10, "output_tokens": 2},
        }
        for key in KEYS
    ]
    steps.append({"text": ANSWER, "usage": {"input_tokens": 10, "output_tokens": 1}})
    if latency:
        for step in steps:
            step["delay"] = latency
    return steps


_SCRIPTS: dict[float, list[dict[str, Any]]] = {}


async def tool_run(latency: float) -> RunOutcome:
    script = _SCRIPTS.get(latency) or _SCRIPTS.setdefault(latency, _script(latency))
    provider = scripted(script)
    session = await provider.open(store=_store, tools=_TOOLS)
    outputs: list[str] = []
    answer = ""
    try:
        async for event in session.send(PROMPT):
            if isinstance(event, ToolResult):
                outputs.append(event.output)
            elif isinstance(event, Complete):
                answer = event.text if event.outcome == "completed" else f"{event.outcome}: {event.stop_reason}"
    finally:
        await provider.close(session)
    return RunOutcome(answer=answer, model_calls=provider.position, tool_outputs=outputs)


async def stream_run(chunks: Sequence[str]) -> list[str]:
    provider = scripted([{"deltas": chunks}])
    session = await provider.open(store=_store, tools=_TOOLS)
    seen: list[str] = []
    try:
        async for event in session.send(PROMPT):
            if isinstance(event, TextDelta):
                seen.append(event.text)
    finally:
        await provider.close(session)
    return seen
