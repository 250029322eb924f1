"""Built-in pipelines, lookup by name or file, and the one-call way to run one.

``single``: one agent answers (the default of ``seamline run``).
``answer-review``: a writer (an agent) and a reviewer (the deterministic
``citation-reviewer``) loop until the reviewer approves or three rounds run out. Both run
on the ``offline`` provider, deterministically.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final

from seamline.errors import InvalidRequest
from seamline.events import Event
from seamline.pipeline.agents import LiveAgents
from seamline.pipeline.controller import PipelineController
from seamline.pipeline.definition import (
    ConvergenceSpec,
    PhaseSpec,
    PipelineDefinition,
    RoleBinding,
    load_definition,
)
from seamline.providers.base import Provider
from seamline.providers.registry import create_provider
from seamline.sessions.store import StoreCore
from seamline.sessions.trace_heads import anchor_head
from seamline.tools.base import Toolset
from seamline.tools.workspace import Workspace, workspace_tools
from seamline.trace.writer import TraceWriter, trace_path

__all__ = ["BUILTIN_PIPELINES", "open_run", "pipeline_names", "resolve_pipeline", "stream_pipeline"]

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


def open_run(
    definition: PipelineDefinition,
    *,
    provider: Provider | str = "offline",
    providers: Mapping[str, Provider] | None = None,
    workspace: str | os.PathLike[str] = ".",
    store: StoreCore | None = None,
    store_path: str | os.PathLike[str] | None = None,
    trace_file: str | os.PathLike[str] | None = None,
    in_memory: bool = False,
    tools: Toolset | None = None,
    yes: bool = False,
    max_steps: int = 50,
    budget_usd: float | None = None,
    params: Mapping[str, Any] | None = None,
    run_id: str | None = None,
) -> PipelineController:
    """Build a controller with live agents and a trace file, ready to :meth:`run`.

    Roles whose binding names a provider get their own; the others use ``provider``.
    The trace goes to ``trace_file``, else to ``traces/<run_id>.jsonl`` beside the
    store (``in_memory``: nowhere, for tests and re-drives)."""
    rid = run_id or uuid.uuid4().hex
    default = provider if isinstance(provider, Provider) else create_provider(provider)
    own = dict(providers or {})
    for name, binding in definition.roles.items():
        if name not in own and binding.provider is not None:
            own[name] = create_provider(binding.provider, model=binding.model, options=binding.options)
    for backend in (default, *own.values()):
        backend.check_budget(budget_usd)  # an unenforceable budget is refused before the run
    ws = Workspace(workspace)
    agents = LiveAgents(
        default=default,
        providers=own,
        workspace=ws.root,
        store=store,
        tools=tools if tools is not None else workspace_tools(ws),
        yes=yes,
        max_steps=max_steps,
        params=dict(params or {}),
        run_id=rid,
    )
    if in_memory:
        writer = TraceWriter(None)
    else:
        writer = TraceWriter(
            trace_file if trace_file is not None else trace_path(rid, store_path=store_path),
            on_flush=None if store is None else functools.partial(anchor_head, store, rid),
        )
    config = {"max_steps": max_steps, "budget_usd": budget_usd, "params": dict(params or {}), "yes": yes}
    return PipelineController(definition, agents=agents, writer=writer, run_id=rid, config=config)


async def stream_pipeline(controller: PipelineController, task: str) -> AsyncIterator[Event]:
    """Run ``controller`` on ``task`` and close its trace whatever happens."""
    try:
        async for event in controller.run(task):
            yield event
    finally:
        controller.writer.close()
