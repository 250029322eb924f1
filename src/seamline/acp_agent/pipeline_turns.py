"""``seamline acp --pipeline NAME``: each prompt runs the pipeline under its controller.

The client sees the pipeline as a ``plan``: one entry per phase (with its roles), the
running phase ``in_progress``, finished ones ``completed``, sent again on every
transition. What the roles say streams as ``agent_thought_chunk`` (it is the work, not
the answer); their tool calls and usage as in a plain session; the run's final text is
the ``agent_message_chunk``. Stop reasons: completed and converged → ``end_turn``,
cancelled and budget → ``cancelled``, vetoed → ``refusal``, oscillating and exhausted →
``max_turn_requests``; a failed run (or an invalid transition) is a JSON-RPC error.

Pipeline roles decide tool permissions as ``seamline run --pipeline`` does (``--yes``,
or ``--sandbox``); they do not ask the client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from seamline.acp_agent.updates import UpdateTranslator, prompt_usage, turn_error
from seamline.definitions import ABORT_PHASE, PipelineDefinition
from seamline.events import Complete, Raw, Usage
from seamline.live import open_run
from seamline.pipeline.builtin import stream_pipeline
from seamline.pipeline.controller import PipelineController
from seamline.runner import RunOptions, make_provider
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools.base import Toolset

__all__ = ["PipelineSession", "PipelineSettings"]

Notify = Callable[[dict[str, Any]], Awaitable[None]]

_STOPS: Final[dict[str, str]] = {
    "completed": "end_turn",
    "converged": "end_turn",
    "cancelled": "cancelled",
    "budget": "cancelled",
    "vetoed": "refusal",
    "oscillating": "max_turn_requests",
    "exhausted": "max_turn_requests",
}


@dataclass
class PipelineSettings:
    """The pipeline every prompt runs, with the agent's run options (the store in them a
    SQLite store or ``None``: a run kept in memory) and the store's path for its trace."""

    definition: PipelineDefinition
    run: RunOptions
    store_path: str | None


@dataclass(eq=False)
class PipelineSession:
    """An ACP session whose every prompt is one pipeline run."""

    session_id: str
    workspace: Path
    tools: Toolset
    settings: PipelineSettings
    controller: PipelineController | None = None
    runs: list[str] = field(default_factory=list)

    def plan(self, statuses: dict[str, str]) -> dict[str, Any]:
        entries = [
            {
                "content": f"{phase.name} ({', '.join(phase.bound_roles())})",
                "priority": "medium",
                "status": statuses.get(phase.name, "pending"),
            }
            for phase in self.settings.definition.phases
        ]
        return {"sessionUpdate": "plan", "entries": entries}

    async def run(self, text: str, notify: Notify) -> dict[str, Any]:
        s, given = self.settings, self.settings.run
        provider = make_provider(given.provider, model=given.model, options=given.options)
        store = given.store if isinstance(given.store, SQLiteStore) else None
        controller = open_run(
            s.definition,
            provider=provider,
            workspace=self.workspace,
            store=store,
            store_path=s.store_path,
            tools=self.tools,
            yes=given.yes,
            max_steps=given.max_steps,
            budget_usd=given.budget_usd,
            in_memory=store is None,
        )
        self.controller = controller
        self.runs.append(controller.run_id)
        translator = UpdateTranslator(workspace=self.workspace, tools=self.tools)
        phases = [p.name for p in s.definition.phases]
        statuses = {phases[0]: "in_progress"}
        await notify(self.plan(statuses))
        usages: list[Usage] = []
        final: Complete | None = None
        try:
            async for event in stream_pipeline(controller, text):
                if isinstance(event, Complete):
                    final = event  # each role's turn ends with one; the run's comes last
                    continue
                if isinstance(event, Raw) and event.source == "controller" and isinstance(event.payload, dict):
                    if event.payload.get("what") == "transition":
                        source, target = event.payload.get("source"), event.payload.get("target")
                        if source in phases and target != ABORT_PHASE:
                            statuses[str(source)] = "completed"
                        if target in phases:
                            statuses[str(target)] = "in_progress"
                        await notify(self.plan(statuses))
                    continue
                if isinstance(event, Usage):
                    usages.append(event)
                for update in _as_thoughts(translator.updates(event)):
                    await notify(update)
        finally:
            self.controller = None
        assert final is not None  # the controller always ends with complete
        if final.text:
            await notify({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": final.text}})
        return _result(final, usages, controller.run_id, translator)

    async def cancel(self) -> None:
        if self.controller is not None:
            await self.controller.cancel()


def _as_thoughts(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**u, "sessionUpdate": "agent_thought_chunk"} if u.get("sessionUpdate") == "agent_message_chunk" else u
        for u in updates
    ]


def _result(final: Complete, usages: list[Usage], run_id: str, translator: UpdateTranslator) -> dict[str, Any]:
    stop = _STOPS.get(final.stop_reason)
    if stop is None:
        raise turn_error(final, translator.last_error)
    result: dict[str, Any] = {
        "stopReason": stop,
        "_meta": {"seamline": {"outcome": final.outcome, "stopReason": final.stop_reason, "runId": run_id}},
    }
    usage = prompt_usage(usages)
    if usage is not None:
        result["usage"] = usage
    return result
