"""The agent builder: modules, stages, tools, tool sources and the profile check.

>>> from seamline.stages import AgentBuilder, AgentProfile, StageSlot
>>> class Audit:
...     name = "example.audit"
...     def configure(self, builder):
...         builder.add_tool_stage(StageSlot.CUSTOM, LogStage())
>>> class LogStage:
...     async def invoke(self, invocation, next):
...         return await next(invocation)
>>> builder = AgentBuilder().use(Audit())
>>> builder.check(AgentProfile(required_modules=("example.audit",)))
>>> builder.check(AgentProfile(required_modules=("example.audit", "mcp", "masking")))
Traceback (most recent call last):
...
seamline.stages.builder.MissingModules: missing required modules: mcp, masking
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from seamline.errors import InvalidRequest, SeamlineError
from seamline.loop.observers import Observer
from seamline.stages.chain import ChatStage, StageChain, ToolStage
from seamline.stages.modules import Module
from seamline.tools.base import Tool, Toolset
from seamline.tools.sources import ToolSource, ToolSourceContext, resolve_tools

__all__ = ["AgentBuilder", "AgentProfile", "MissingModules", "RunParts"]


class MissingModules(InvalidRequest):
    """A profile requires modules that were not added; ``missing`` names every one."""

    def __init__(self, missing: Sequence[str]) -> None:
        super().__init__(f"missing required modules: {', '.join(missing)}")
        self.missing = tuple(missing)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentProfile:
    """What an agent needs and may use.

    - ``required_modules``: names of modules that must be added before a session opens;
    - ``allowed_tools``: the explicit allowlist (``None``: every tool of the run);
    - ``mcp_servers``: MCP servers of this profile, merged over the user's and the
      workspace's configuration (see ``docs/mcp.md``).
    """

    name: str = "default"
    required_modules: tuple[str, ...] = ()
    allowed_tools: tuple[str, ...] | None = None
    mcp_servers: Mapping[str, Mapping[str, object]] = field(default_factory=dict)


@dataclass(slots=True)
class RunParts:
    """What the builder hands a run: the tools offered, the stages, the observers."""

    tools: Toolset
    stages: StageChain
    observers: tuple[Observer, ...]


class AgentBuilder:
    """Collects what modules and code add; nothing runs until a run uses the builder."""

    def __init__(self) -> None:
        self._modules: list[Module] = []
        self._chat: list[tuple[int, ChatStage]] = []
        self._tool_stages: list[tuple[int, ToolStage]] = []
        self._tools: list[Tool] = []
        self._sources: list[ToolSource] = []
        self._observers: list[Observer] = []

    # -- what modules call ---------------------------------------------------------------
    def use(self, module: Module) -> AgentBuilder:
        """Add ``module``: its ``configure(self)`` runs now. A name may be used once."""
        name = module.name
        if name is not None and name in self.module_names:
            raise InvalidRequest(f"module {name!r} is already in use")
        self._modules.append(module)
        module.configure(self)
        return self

    def add_chat_stage(self, slot: int, stage: ChatStage) -> AgentBuilder:
        """Wrap the streaming model call at ``slot`` (see :class:`~seamline.stages.StageSlot`)."""
        self._chat.append((int(slot), stage))
        return self

    def add_tool_stage(self, slot: int, stage: ToolStage) -> AgentBuilder:
        """Wrap every approved tool call at ``slot``."""
        self._tool_stages.append((int(slot), stage))
        return self

    def add_tool(self, tool: Tool) -> AgentBuilder:
        """Offer a host tool (it wins over any source's tool of the same name)."""
        self._tools.append(tool)
        return self

    def add_tool_source(self, source: ToolSource) -> AgentBuilder:
        """Add a source of tools, asked once the profile is known."""
        self._sources.append(source)
        return self

    def add_observer(self, observer: Observer) -> AgentBuilder:
        self._observers.append(observer)
        return self

    # -- what a run calls ----------------------------------------------------------------
    @property
    def module_names(self) -> list[str]:
        """Names of the modules added, in order; nameless modules are not listed."""
        return [m.name for m in self._modules if m.name is not None]

    def check(self, profile: AgentProfile | None) -> None:
        """Raise :class:`MissingModules`, naming every missing one, unless every module
        ``profile`` requires was added. A nameless module satisfies nothing."""
        if profile is None:
            return
        have = set(self.module_names)
        missing = [name for name in profile.required_modules if name not in have]
        if missing:
            raise MissingModules(missing)

    def stages(self) -> StageChain:
        if not (self._chat or self._tool_stages):
            return _NO_STAGES  # (a chain is immutable: one empty chain serves every run)
        return StageChain(chat=self._chat, tool=self._tool_stages)

    def open_run(
        self,
        *,
        host: Toolset,
        profile: AgentProfile | None = None,
        allow: Sequence[str] | None = None,
        workspace: Path | None = None,
        report: Callable[[str], None] | None = None,
    ) -> AbstractAsyncContextManager[RunParts]:
        """Check the profile, ask the tool sources, apply the allowlist; close the sources
        when the block ends (in the same task that opened them)."""
        self.check(profile)
        wanted = allow if allow is not None else (profile.allowed_tools if profile else None)
        if not (self._sources or self._tools or wanted is not None):
            # Nothing to add, filter or close: the host tools as given, no copy, and no
            # generator kept for the run's length (a run in flight holds fewer objects).
            return _Ready(RunParts(tools=host, stages=self.stages(), observers=tuple(self._observers)))
        return self._open_sources(host=host, profile=profile, wanted=wanted, workspace=workspace, report=report)

    @asynccontextmanager
    async def _open_sources(
        self,
        *,
        host: Toolset,
        profile: AgentProfile | None,
        wanted: Sequence[str] | None,
        workspace: Path | None,
        report: Callable[[str], None] | None,
    ) -> AsyncIterator[RunParts]:
        base = Toolset(host, workspace=host.workspace)
        for extra in self._tools:
            if base.get(extra.name) is None:
                base.add(extra)
        context = ToolSourceContext(profile=profile, workspace=workspace, report=report or _warn)
        try:
            tools = await resolve_tools(base, self._sources, context)
            if wanted is not None:
                tools = tools.restrict(wanted)
            yield RunParts(tools=tools, stages=self.stages(), observers=tuple(self._observers))
        finally:
            await _close_sources(self._sources)


_NO_STAGES: Final = StageChain()


class _Ready:
    """``open_run`` of a builder with nothing to open: the parts, and nothing to close."""

    __slots__ = ("parts",)

    def __init__(self, parts: RunParts) -> None:
        self.parts = parts

    async def __aenter__(self) -> RunParts:
        return self.parts

    async def __aexit__(self, *exc: object) -> None:
        return None


async def _close_sources(sources: Sequence[ToolSource]) -> None:
    for source in reversed(sources):
        closer = getattr(source, "aclose", None)
        if closer is None:
            continue
        try:
            await closer()
        except SeamlineError:
            pass  # a source that fails to close has nothing left to give the run


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, stacklevel=3)
