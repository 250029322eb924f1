"""seamline through ``seamline.Agent`` (what users call), with the SQLite store on.

One agent for the whole process, as a user keeps one: ``Agent(provider=settings, store=...,
tools=[lookup])``, then ``await agent.run(PROMPT)`` per run. The settings make a fresh
scripted provider for each run (its script position is the run's state), as a provider
named by settings is made anew for each session of an agent. Model calls are counted
from the usage figures the run handed back (one per scripted response).
"""

# (no `from __future__ import annotations`: the dataclass below is made in a module loaded by path)

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import ANSWER, KEYS, PROMPT, RunOutcome, lookup_value

import seamline as _seamline
from seamline.events import TextDelta, ToolResult, Usage
from seamline.providers.base import Provider
from seamline.providers.settings import ScriptedSettings
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.testing import scripted
from seamline.tools import tool

NAME = "seamline_agent"
VERSION = _seamline.__version__

_store: SQLiteStore | None = None
_agents: dict[object, _seamline.Agent] = {}
_workdir: Path | None = None


def setup(workdir: Path) -> None:
    global _store, _workdir
    _store = SQLiteStore(workdir / "bench.db")
    _workdir = workdir


def teardown() -> None:
    if _store is not None:
        _store.close()


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return lookup_value(key)


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


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchScript(ScriptedSettings):
    """The bench's script as provider settings: a fresh scripted provider per session."""

    latency: float = 0.0

    def create(self) -> Provider:
        script = _SCRIPTS.get(self.latency) or _SCRIPTS.setdefault(self.latency, _script(self.latency))
        return scripted(script)


def _agent(key: object, provider: BenchScript) -> _seamline.Agent:
    agent = _agents.get(key)
    if agent is None:
        agent = _agents[key] = _seamline.Agent(
            provider=provider, store=_store, tools=[lookup], workspace=_workdir, workspace_tools=False
        )
    return agent


async def tool_run(latency: float) -> RunOutcome:
    result = await _agent(latency, BenchScript(latency=latency)).run(PROMPT)
    outputs = [e.output for e in result.events if isinstance(e, ToolResult)]
    calls = sum(1 for e in result.events if isinstance(e, Usage))
    answer = result.text if result.outcome == "completed" else f"{result.outcome}: {result.stop_reason}"
    return RunOutcome(answer=answer, model_calls=calls, tool_outputs=outputs)


async def stream_run(chunks: Sequence[str]) -> list[str]:
    agent = _seamline.Agent(
        provider=scripted([{"deltas": chunks}]), store=_store, tools=[lookup], workspace=_workdir, workspace_tools=False
    )
    seen: list[str] = []
    async for event in agent.stream(PROMPT):
        if isinstance(event, TextDelta):
            seen.append(event.text)
    return seen
