"""Tool sources: tools that exist only once the agent's profile is known.

A tool source has a ``name`` and ``get_tools(context)``; it may also have ``aclose()``,
called when the run ends (an MCP source closes its server sessions there). Sources are
asked in the order they were added; a *host* tool (one given directly) wins over a
source's tool of the same name, and an earlier source wins over a later one. Every such
shadowing is reported through ``context.report``.

A source that fails with a classified error is reported and left out when it is not
``required``; a required one stops the run before any session opens.

>>> import asyncio
>>> from seamline.tools import Toolset, tool
>>> @tool
... def echo(text: str) -> str:
...     '''Say it back.'''
...     return text
>>> class Greetings:
...     name = "greetings"
...     async def get_tools(self, context):
...         @tool(name="echo")
...         def other_echo(text: str) -> str:
...             return "never"
...         @tool
...         def hello() -> str:
...             return "hello"
...         return [other_echo, hello]
>>> notes = []
>>> ctx = ToolSourceContext(report=notes.append)
>>> resolved = asyncio.run(resolve_tools(Toolset([echo]), [Greetings()], ctx))
>>> resolved.names(), notes
(['echo', 'hello'], ["tool 'echo' of source greetings is shadowed by the host tool of the same name"])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from seamline.errors import SeamlineError
from seamline.tools.base import Tool, Toolset

__all__ = ["ToolSource", "ToolSourceContext", "resolve_tools"]


def _ignore(message: str) -> None:
    return None


@dataclass(slots=True)
class ToolSourceContext:
    """What a tool source learns about the run it serves.

    ``report`` takes a one-line notice (names and counts, never content); the CLI shows
    notices on stderr as warnings.
    """

    profile: Any = None  # the AgentProfile, when there is one
    workspace: Path | None = None
    report: Callable[[str], None] = _ignore
    options: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class ToolSource(Protocol):
    """Produces tools once the profile is known. ``required`` (default False) decides
    whether its failure stops the run."""

    @property
    def name(self) -> str: ...

    async def get_tools(self, context: ToolSourceContext) -> Sequence[Tool]: ...


async def resolve_tools(host: Toolset, sources: Sequence[ToolSource], context: ToolSourceContext) -> Toolset:
    """The host tools plus every source's tools; host first, earlier sources next."""
    merged = Toolset(host, workspace=host.workspace)
    host_names = set(host.names())
    for source in sources:
        try:
            produced = await source.get_tools(context)
        except SeamlineError as exc:
            if getattr(source, "required", False):
                raise
            context.report(f"tool source {source.name} left out: {exc.kind} error: {exc.message}")
            continue
        for found in produced:
            existing = merged.get(found.name)
            if existing is None:
                merged.add(found)
                continue
            winner = "the host tool" if found.name in host_names else f"the tool of {_origin(existing)}"
            context.report(f"tool {found.name!r} of source {source.name} is shadowed by {winner} of the same name")
    return merged


def _origin(found: Tool) -> str:
    return f"{found.source} server {found.server}" if found.server else found.source
