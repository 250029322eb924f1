"""Shared helpers for the pipeline and trace tests: a small workspace, runs, scripts."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from seamline.definitions import PipelineDefinition
from seamline.events import Event
from seamline.live import open_run
from seamline.pipeline.builtin import stream_pipeline
from seamline.pipeline.controller import PipelineController
from seamline.providers.base import Provider
from seamline.testing import scripted

GUIDE = [
    "# Adding a provider",
    "A provider is one subclass of Provider and one registry entry.",
    "It implements the _step hook and declares its capabilities.",
    "",
    "## Budgets",
    "A run stops at its cost cap with outcome budget.",
]


def make_workspace(root: Path) -> Path:
    ws = root / "ws"
    ws.mkdir()
    (ws / "guide.md").write_text("\n".join(GUIDE) + "\n")
    (ws / "notes.txt").write_text("unrelated notes about gardening\n")
    return ws


def read_then_answer(text: str, *, path: str = "guide.md", cost: float | None = None) -> list[dict[str, Any]]:
    """Two scripted model calls: read ``path``, then answer ``text``."""
    usage = {"input_tokens": 100, "output_tokens": 20} | ({"cost_usd": cost} if cost is not None else {})
    return [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": path}}], "usage": usage},
        {"text": text, "usage": usage},
    ]


GOOD_ANSWER = (
    "A provider is a subclass plus a registry entry.\n"
    "   > A provider is one subclass of Provider and one registry entry.\n"
    "Sources: guide.md:1-3\n"
)
NO_SOURCES = "A provider is a subclass.\n"
FABRICATED = "Providers are plugins.\n   > Providers are loaded from the moon.\nSources: guide.md:1-3\n"


def run_pipeline(
    definition: PipelineDefinition,
    task: str,
    *,
    workspace: Path,
    provider: Provider | str = "offline",
    providers: Mapping[str, Provider] | None = None,
    trace_file: Path | None = None,
    budget_usd: float | None = None,
    run_id: str | None = None,
) -> tuple[PipelineController, list[Event]]:
    """Run a pipeline to its end; the trace is in memory unless ``trace_file`` is given."""
    controller = open_run(
        definition,
        provider=provider,
        providers=providers,
        workspace=workspace,
        trace_file=trace_file,
        in_memory=trace_file is None,
        budget_usd=budget_usd,
        run_id=run_id,
    )

    async def drive() -> list[Event]:
        return [event async for event in stream_pipeline(controller, task)]

    return controller, asyncio.run(drive())


def scripted_writer(responses: Sequence[dict[str, Any]]) -> Provider:
    return scripted(list(responses))
