"""seamline through ``seamline.Agent`` with its store off: the same runs as
``seamline_agent.py`` with ``store=None`` (the column "seamline Agent, store off")."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from harness import RunOutcome

_spec = importlib.util.spec_from_file_location(
    "_bench_target_seamline_agent_on", Path(__file__).with_name("seamline_agent.py")
)
assert _spec is not None and _spec.loader is not None
_on = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_on)

NAME = "seamline_agent_nostore"
VERSION = _on.VERSION


def setup(workdir: Path) -> None:
    _on._store = None
    _on._workdir = workdir


def teardown() -> None:
    pass


async def tool_run(latency: float) -> RunOutcome:
    outcome: RunOutcome = await _on.tool_run(latency)
    return outcome


async def stream_run(chunks: Sequence[str]) -> list[str]:
    seen: list[str] = await _on.stream_run(chunks)
    return seen
