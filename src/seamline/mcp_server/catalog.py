"""What ``seamline mcp`` offers as MCP tools: one per declared agent and per pipeline, and
the session tools; each with the input schema the operator's policy allows.

The policy is ``seamline serve``'s (:class:`~seamline.server.agents_file.ServePolicy`): a
declared agent's tool takes the task and only the options its ``client_options`` name (and
``yes`` only where the operator set ``yes = true``); without ``--agents FILE`` one tool,
``run``, takes any provider under the safe defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from seamline.errors import InvalidRequest
from seamline.pipeline.builtin import BUILTIN_PIPELINES
from seamline.providers.registry import provider_class
from seamline.server.agents_file import AgentSpec, ServePolicy

__all__ = ["SESSION_TOOLS", "ToolEntry", "tool_catalog", "tool_name_for"]

ToolKind = Literal["agent", "run", "pipeline", "sessions_list", "session_read", "session_continue"]
SESSION_TOOLS: Final = ("sessions_list", "session_read", "session_continue")
_NAME_BAD: Final = re.compile(r"[^A-Za-z0-9_.-]")

_TASK: Final = {"type": "string", "description": "what to do: the prompt of the run"}
_WORKSPACE: Final = {
    "type": "string",
    "description": "the folder the agent works in, under one the operator offers (default: the first)",
}
_BUDGET: Final = {"type": "number", "minimum": 0, "description": "the most this run may spend, in USD"}


@dataclass(frozen=True)
class ToolEntry:
    """One MCP tool: its name, description, input schema and what a call starts."""

    name: str
    description: str
    input_schema: dict[str, Any]
    kind: ToolKind
    agent: str | None = None  # the declared agent an ``agent`` tool runs
    pipeline: str | None = None  # the pipeline a ``pipeline`` tool runs
    read_only: bool = False


def tool_name_for(name: str) -> str:
    """An MCP tool name (letters, digits, ``_ . -``) for an agent or pipeline name."""
    return _NAME_BAD.sub("_", name)[:64] or "_"


def _object(properties: Mapping[str, Any], required: tuple[str, ...] = ("task",)) -> dict[str, Any]:
    return {"type": "object", "properties": dict(properties), "required": list(required), "additionalProperties": False}


def _agent_tool(spec: AgentSpec) -> ToolEntry:
    properties: dict[str, Any] = {"task": _TASK, "workspace": _WORKSPACE, "budget_usd": _BUDGET}
    if spec.client_options:
        cls = provider_class(spec.provider)
        properties["options"] = {
            "type": "object",
            "description": "provider options the operator lets a client set",
            "properties": {
                key: {"type": "string", "description": cls.options[key].help} for key in spec.client_options
            },
            "additionalProperties": False,
        }
    if spec.yes:
        properties["yes"] = {"type": "boolean", "description": "run write and shell tools without asking"}
    what = f"provider {spec.provider}" + (f", model {spec.model}" if spec.model else "")
    description = spec.description or f"Run seamline agent {spec.name} ({what}) on a task"
    return ToolEntry(
        name=tool_name_for(spec.name),
        description=f"{description}. Returns its answer, run id, cost and changed files.",
        input_schema=_object(properties),
        kind="agent",
        agent=spec.name,
    )


def _run_tool() -> ToolEntry:
    properties = {
        "task": _TASK,
        "provider": {"type": "string", "description": "the backend (default: offline)"},
        "model": {"type": "string", "description": "the model, in the provider's own terms"},
        "options": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "provider options that name no program, path or endpoint",
        },
        "workspace": _WORKSPACE,
        "budget_usd": _BUDGET,
    }
    return ToolEntry(
        name="run",
        description="Run a seamline agent on a task with any provider under the safe defaults "
        "(a program-running backend inside the sandbox). Returns its answer, run id, cost and changed files.",
        input_schema=_object(properties),
        kind="run",
    )


def _pipeline_tool(name: str, agents: Mapping[str, AgentSpec]) -> ToolEntry:
    definition = BUILTIN_PIPELINES[name]
    properties: dict[str, Any] = {"task": _TASK, "workspace": _WORKSPACE, "budget_usd": _BUDGET}
    if agents:
        properties["agent"] = {"type": "string", "enum": list(agents), "description": "the declared agent to run"}
    else:
        properties["provider"] = {"type": "string", "description": "the backend (default: offline)"}
        properties["model"] = {"type": "string", "description": "the model, in the provider's own terms"}
    phases = " → ".join(p.name for p in definition.phases)
    return ToolEntry(
        name=tool_name_for(f"pipeline_{name}"),
        description=f"Run seamline pipeline {name} ({phases}) on a task under its controller; "
        "returns the final answer, run id (its trace) and cost.",
        input_schema=_object(properties, ("task", "agent") if agents else ("task",)),
        kind="pipeline",
        pipeline=name,
    )


def _session_tools() -> list[ToolEntry]:
    session_id = {"type": "string", "description": "a seamline session id (or a unique prefix)"}
    return [
        ToolEntry(
            name="sessions_list",
            description="List stored seamline sessions, newest first (id, provider, status, cost, title).",
            input_schema=_object({"limit": {"type": "integer", "minimum": 1, "maximum": 1000}}, ()),
            kind="sessions_list",
            read_only=True,
        ),
        ToolEntry(
            name="session_read",
            description="Read one seamline session: its row, transcript and the files it touched.",
            input_schema=_object({"session_id": session_id}, ("session_id",)),
            kind="session_read",
            read_only=True,
        ),
        ToolEntry(
            name="session_continue",
            description="Continue a stored seamline session with another task (a new turn; its agent's settings hold).",
            input_schema=_object(
                {"session_id": session_id, "task": _TASK, "budget_usd": _BUDGET}, ("session_id", "task")
            ),
            kind="session_continue",
        ),
    ]


def tool_catalog(policy: ServePolicy, *, pipelines: bool = True) -> dict[str, ToolEntry]:
    """Every tool this server offers, by name; two agents whose names map to one tool name
    are refused (the operator renames one)."""
    entries = [_agent_tool(spec) for spec in policy.agents.values()] if policy.agents else [_run_tool()]
    if pipelines:
        entries += [_pipeline_tool(name, policy.agents) for name in BUILTIN_PIPELINES]
    entries += _session_tools()
    catalog: dict[str, ToolEntry] = {}
    for entry in entries:
        if entry.name in catalog:
            raise InvalidRequest(f"two tools would be named {entry.name!r}: rename an agent in the agents file")
        catalog[entry.name] = entry
    return catalog
