"""Built-in pipelines, lookup by name or file, and streaming a run to its end.

``single``: one agent answers (the default of ``seamline run``).
``answer-review``: a writer (an agent) and a reviewer (the deterministic
``citation-reviewer``) loop until the reviewer approves or three rounds run out. Both run
on the ``offline`` provider, deterministically. A run on live providers is opened by
:func:`seamline.live.open_run`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

from seamline.definitions import (
    ConvergenceSpec,
    PhaseSpec,
    PipelineDefinition,
    RoleBinding,
    load_definition,
)
from seamline.errors import InvalidRequest
from seamline.events import Event
from seamline.pipeline.controller import PipelineController

__all__ = ["ANSWER_REVIEW", "BUILTIN_PIPELINES", "SINGLE", "pipeline_names", "resolve_pipeline", "stream_pipeline"]

SINGLE: Final = PipelineDefinition(
    name="single",
    description="one agent answers the prompt",
    phases=(PhaseSpec(name="answer", role="agent", next="done"),),
    transitions={"answer": ("done",)},
    roles={"agent": RoleBinding(kind="agent")},
    convergence=ConvergenceSpec(strategy="single-pass", max_rounds=1),
).validate()

ANSWER_REVIEW: Final = PipelineDefinition(
    name="answer-review",
    description="a writer answers; a citation reviewer approves, asks for a revision or vetoes; at most 3 rounds",
    phases=(
        PhaseSpec(name="write", role="writer", next="review"),
        PhaseSpec(name="review", role="reviewer", judge=True, on_continue="write", next="done"),
    ),
    transitions={"write": ("review",), "review": ("write", "done")},
    roles={"writer": RoleBinding(kind="agent"), "reviewer": RoleBinding(kind="citation-reviewer")},
    convergence=ConvergenceSpec(strategy="reviewer-approval", max_rounds=3, window=2),
).validate()

BUILTIN_PIPELINES: Final[dict[str, PipelineDefinition]] = {d.name: d for d in (SINGLE, ANSWER_REVIEW)}


def pipeline_names() -> list[str]:
    return list(BUILTIN_PIPELINES)


def resolve_pipeline(name_or_file: str) -> PipelineDefinition:
    """A built-in by name, else a YAML/JSON definition file."""
    if name_or_file in BUILTIN_PIPELINES:
        return BUILTIN_PIPELINES[name_or_file]
    path = Path(name_or_file)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        return load_definition(path)
    raise InvalidRequest(
        f"unknown pipeline {name_or_file!r}; built in: {', '.join(BUILTIN_PIPELINES)} (or give a file)"
    )


async def stream_pipeline(controller: PipelineController, task: str) -> AsyncIterator[Event]:
    """Run ``controller`` on ``task`` and close its trace whatever happens."""
    try:
        async for event in controller.run(task):
            yield event
    finally:
        controller.writer.close()
