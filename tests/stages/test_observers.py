"""Observers: the documented callback order, authorizing observers fail closed, telemetry is best effort."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from seamline.events import Complete, Error, ToolResult
from seamline.loop import observers as observers_module
from seamline.loop.observers import LoopContext, Observer
from seamline.runner import run
from seamline.testing import scripted
from seamline.tools import Toolset, tool


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


class Recorder(Observer):
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def on_loop_start(self, ctx: LoopContext) -> None:
        self.calls.append("on_loop_start")

    async def on_model_attempt(self, ctx: LoopContext, attempt: int, error: Exception | None) -> None:
        self.calls.append("on_model_attempt")

    async def on_delta(self, ctx: LoopContext, event: Any) -> None:
        self.calls.append("on_delta")

    async def on_response(self, ctx: LoopContext, message: Any) -> None:
        self.calls.append("on_response")

    async def on_tool_call(self, ctx: LoopContext, call: Any) -> None:
        self.calls.append("on_tool_call")

    async def on_tool_result(self, ctx: LoopContext, call: Any, result: Any) -> None:
        self.calls.append("on_tool_result")

    async def on_turn_end(self, ctx: LoopContext, message: Any) -> None:
        self.calls.append("on_turn_end")

    async def on_loop_end(self, ctx: LoopContext, outcome: str) -> None:
        self.calls.append("on_loop_end")


SCRIPT = [
    {"deltas": ["a", "b"], "tool_calls": [{"name": "lookup", "arguments": {"key": "x"}}]},
    {"text": "done", "stream": True},
]


def test_callbacks_come_in_the_documented_order(tmp_path: Path) -> None:
    recorder = Recorder()
    result = asyncio.run(
        run("go", provider=scripted(SCRIPT), workspace=tmp_path, tools=Toolset([lookup]), observers=[recorder])
    )
    assert result.outcome == "completed"
    assert recorder.calls == [
        "on_loop_start",
        "on_model_attempt",
        "on_delta",
        "on_delta",
        "on_response",
        "on_tool_call",
        "on_tool_result",
        "on_model_attempt",
        "on_delta",
        "on_response",
        "on_turn_end",
        "on_loop_end",
    ]
    # The order the module docstring documents is the order observed.
    doc = observers_module.__doc__ or ""
    documented = re.findall(r"on_[a-z_]+", doc.split("::")[1].split("An observer with")[0])
    observed = list(dict.fromkeys(recorder.calls))
    assert [c for c in documented if c in observed] == observed


class Broken(Observer):
    def __init__(self, *, authorizes: bool) -> None:
        self.authorizes_flag = authorizes

    @property  # type: ignore[override]
    def authorizes(self) -> bool:  # type: ignore[override]
        return self.authorizes_flag

    async def on_tool_call(self, ctx: LoopContext, call: Any) -> None:
        raise RuntimeError("policy backend unreachable")


def test_an_authorizing_observer_that_raises_fails_closed(tmp_path: Path) -> None:
    ran: list[str] = []

    @tool
    def probe(key: str) -> str:
        """Probe."""
        ran.append(key)
        return "ran"

    script = [{"tool_calls": [{"name": "probe", "arguments": {"key": "x"}}]}, {"text": "done"}]
    result = asyncio.run(
        run(
            "go",
            provider=scripted(script),
            workspace=tmp_path,
            tools=Toolset([probe]),
            observers=[Broken(authorizes=True)],
        )
    )
    assert ran == []  # the tool never ran
    assert result.outcome == "failed" and result.stop_reason == "permission"
    errors = [e for e in result.events if isinstance(e, Error)]
    assert errors and errors[0].kind == "permission" and "policy backend unreachable" in errors[0].message
    assert sum(isinstance(e, Complete) for e in result.events) == 1


def test_a_telemetry_observer_that_raises_is_ignored(tmp_path: Path) -> None:
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"key": "x"}}]}, {"text": "done"}]
    result = asyncio.run(
        run(
            "go",
            provider=scripted(script),
            workspace=tmp_path,
            tools=Toolset([lookup]),
            observers=[Broken(authorizes=False)],
        )
    )
    assert result.outcome == "completed" and result.text == "done"
    assert [e.output for e in result.events if isinstance(e, ToolResult)] == ["X"]
