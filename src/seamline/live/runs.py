"""Opening a pipeline run on live providers: its agents, its trace file, its controller."""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Mapping
from typing import Any

from seamline.definitions import PipelineDefinition
from seamline.live.agents import LiveAgents
from seamline.pipeline.controller import PipelineController
from seamline.providers.base import Provider
from seamline.providers.pause import OnBudget, own_turns_refusal
from seamline.providers.registry import create_provider
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.trace_heads import anchor_head
from seamline.tools.base import Toolset
from seamline.tools.workspace import Workspace, workspace_tools
from seamline.trace.writer import TraceWriter, trace_path

__all__ = ["open_run"]


def open_run(
    definition: PipelineDefinition,
    *,
    provider: Provider | str = "offline",
    providers: Mapping[str, Provider] | None = None,
    workspace: str | os.PathLike[str] = ".",
    store: SessionStore | None = None,
    store_path: str | os.PathLike[str] | None = None,
    trace_file: str | os.PathLike[str] | None = None,
    in_memory: bool = False,
    tools: Toolset | None = None,
    yes: bool = False,
    max_steps: int = 50,
    budget_usd: float | None = None,
    params: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    on_budget: OnBudget = "fail",
) -> PipelineController:
    """Build a controller with live agents and a trace file, ready to :meth:`run`.

    Roles whose binding names a provider get their own; the others use ``provider``.
    The trace goes to ``trace_file``, else to ``traces/<run_id>.jsonl`` beside the
    store (``in_memory``: nowhere, for tests and re-drives). ``on_budget="pause"``: the
    shared ``budget_usd`` pauses every role at its next model request, until
    :meth:`~seamline.pipeline.guard.SpawnGuard.raise_cap` (``controller.guard``) raises it."""
    rid = run_id or uuid.uuid4().hex
    default = provider if isinstance(provider, Provider) else create_provider(provider)
    own = dict(providers or {})
    for name, binding in definition.roles.items():
        if name not in own and binding.provider is not None:
            own[name] = create_provider(binding.provider, model=binding.model, options=binding.options)
    for backend in (default, *own.values()):
        backend.check_budget(budget_usd)  # an unenforceable budget is refused before the run
        if on_budget == "pause" and backend.runs_own_tools:
            raise own_turns_refusal(backend.name)  # it cannot stop between model requests
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
    controller = PipelineController(definition, agents=agents, writer=writer, run_id=rid, config=config)
    controller.guard.on_budget = on_budget
    agents.guard = controller.guard
    return controller
