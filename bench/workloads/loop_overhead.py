"""Loop overhead: CPU of seamline per model call, against a bare asyncio loop.

Each run is six model calls and five tool calls on the scripted provider (no latency),
with the SQLite store on. The floor does the same work by hand: an async generator per
model call, a dict lookup and an await per tool call. Both check their own result.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import seamline
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.testing import scripted
from seamline.tools import Toolset, tool

CALLS = 6
TOOLS = 5


def _script() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [
        {
            "tool_calls": [{"name": "lookup", "arguments": {"key": f"k{i}"}}],
            "usage": {"input_tokens": 10, "output_tokens": 2},
        }
        for i in range(TOOLS)
    ]
    steps.append({"text": "done", "usage": {"input_tokens": 10, "output_tokens": 1}})
    return steps


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


async def _seamline_runs(n: int, store: SQLiteStore) -> float:
    tools = Toolset([lookup])
    started = time.process_time()
    for _ in range(n):
        provider = scripted(_script())
        session = await provider.open(store=store, tools=tools)
        final = None
        calls = 0
        async for event in session.send("go"):
            if event.type == "tool_result":
                calls += 1
            final = event
        assert final is not None and final.type == "complete" and final.text == "done" and calls == TOOLS  # type: ignore[union-attr]
        assert provider.position == CALLS
    return time.process_time() - started


async def _floor_runs(n: int) -> float:
    table = {"lookup": lambda key: key.upper()}

    async def model(step: int):  # type: ignore[no-untyped-def]
        if step < TOOLS:
            yield ("call", "lookup", {"key": f"k{step}"})
        else:
            yield ("text", "done")

    started = time.process_time()
    for _ in range(n):
        history: list[Any] = ["go"]
        step = 0
        calls = 0
        text = None
        while True:
            pending = []
            async for item in model(step):
                if item[0] == "call":
                    pending.append(item)
                else:
                    text = item[1]
            step += 1
            if not pending:
                break
            for _, name, arguments in pending:
                history.append(table[name](**arguments))
                calls += 1
                await asyncio.sleep(0)
        assert text == "done" and calls == TOOLS and step == CALLS
    return time.process_time() - started


def run(*, quick: bool = False) -> dict[str, Any]:
    n = 50 if quick else 1000
    reps = 3 if quick else 7
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.db")
        seam: list[float] = []
        floor: list[float] = []
        for _ in range(reps):
            seam.append(asyncio.run(_seamline_runs(n, store)))
            floor.append(asyncio.run(_floor_runs(n)))
        store.close()
    per_call_seam = statistics.median(seam) / (n * CALLS) * 1e6
    per_call_floor = statistics.median(floor) / (n * CALLS) * 1e6
    return {
        "runs": n,
        "repetitions": reps,
        "seamline_us_per_model_call": round(per_call_seam, 2),
        "floor_us_per_model_call": round(per_call_floor, 2),
        "ratio": round(per_call_seam / per_call_floor, 1),
        "seamline_version": seamline.__version__,
    }
