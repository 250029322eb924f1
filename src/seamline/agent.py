"""An agent: a provider, instructions and tools, set once and run many times.

>>> import seamline
>>> from seamline.testing import scripted
>>> agent = seamline.Agent(provider=scripted([{"text": "hello"}]), instructions="Be brief.", store=None)
>>> agent.run_sync("Say hello").text
'hello'

``run`` / ``run_sync`` / ``stream`` each run one turn on a new session; ``async with
agent.session() as s`` keeps one session open for many turns (``s.run``, ``s.stream``),
and closes it, and the provider's clients, on the way out. ``session(resume=ID)`` and
``session(fork=ID)`` go on from a stored session with the instructions it was started
with. The agent builds on :mod:`seamline.runner`: what it does, a call of
:func:`seamline.run` does with the same options.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from seamline import worktrees
from seamline.errors import InvalidRequest, SandboxViolation
from seamline.events import Event
from seamline.loop.observers import Observer
from seamline.providers.base import Provider, ProviderSession
from seamline.providers.failover import Failover, FallbackChoice, fallback_backends
from seamline.providers.pause import OnBudget
from seamline.providers.registry import create_provider
from seamline.providers.settings import ProviderSettings
from seamline.runner import RunOptions, RunResult, check_on_budget, collect, make_provider, open_failover
from seamline.runner import run as run_turn
from seamline.runner import stream as stream_turn
from seamline.sandbox.probe import SandboxMode, open_sandbox
from seamline.sandbox.runtime import Sandbox
from seamline.sessions.portable_store import SessionStore
from seamline.stages.builder import AgentBuilder, AgentProfile
from seamline.tools import workspace as workspace_room
from seamline.tools.approval import Approval
from seamline.tools.base import Tool, Toolset
from seamline.worktrees import Worktree

__all__ = ["Agent", "AgentSession"]


class AgentSession:
    """One open session of an :class:`Agent`, for several turns; made by
    :meth:`Agent.session`. Each turn sees the turns before it."""

    def __init__(self, session: ProviderSession | Failover, *, max_steps: int, budget_usd: float | None) -> None:
        self._session = session
        self._max_steps = max_steps
        self._budget_usd = budget_usd

    @property
    def session_id(self) -> str:
        """The session's id in the store (for ``resume=`` and ``fork=``)."""
        return self._session.session_id

    async def stream(self, prompt: str, *, max_steps: int | None = None) -> AsyncIterator[Event]:
        """Run one turn on this session and yield its events as they happen."""
        steps = self._max_steps if max_steps is None else max_steps
        async for event in self._session.send(prompt, max_steps=steps, budget_usd=self._budget_usd):
            yield event

    async def run(self, prompt: str, *, max_steps: int | None = None) -> RunResult:
        """Run one turn on this session and collect it."""
        return await collect(self.stream(prompt, max_steps=max_steps))

    async def raise_budget(self, budget_usd: float, *, max_steps: int | None = None) -> AsyncIterator[Event]:
        """Raise the budget of the turn that paused at it (``on_budget="pause"``) to
        ``budget_usd`` in all and go on with it; later turns keep the new budget."""
        session = self._session.session if isinstance(self._session, Failover) else self._session
        steps = self._max_steps if max_steps is None else max_steps
        going_on = session.continue_paused(budget_usd=budget_usd, max_steps=steps)
        self._budget_usd = budget_usd
        async for event in going_on:
            yield event


class Agent:
    """A provider with instructions and tools, ready to run prompts.

    ``provider`` is a provider's name (with ``model`` and string ``options``, as on the
    CLI), typed settings such as :class:`~seamline.providers.settings.OpenAISettings`, or a
    provider object. ``instructions`` are the system prompt; the store keeps them, so a
    resumed or forked session has them too. ``tools`` are offered; a ``workspace`` given
    adds the workspace's read tools (read_file, list_dir, grep), as ``seamline run
    --workspace`` does; ``workspace_tools=True`` adds all of them (read, write, shell),
    ``workspace_tools=False`` none, and ``sandbox`` asks for all of them isolated (``"auto"``, ``"bwrap"``, ``"container"`` or an open sandbox; as with
    ``seamline run --sandbox``, isolated write and shell tools need no ``yes``).
    ``budget_usd`` caps each turn's cost; ``on_budget="pause"`` pauses a turn that reaches
    it before its next model request (``AgentSession.raise_budget`` or ``seamline runs
    raise`` go on with it) instead of ending it ``budget``; ``store`` is an open store, a path or a
    ``postgresql://`` URL, or ``None`` for no record. ``worktree=True`` gives each run (each
    ``run``, ``stream`` or ``session()``) a new git worktree of the repository holding
    ``workspace``, on its own branch (``branch``, default ``seamline/<run id[:8]>``), with
    one commit per turn, and all the workspace tools there (unless ``workspace_tools=False``;
    write and shell calls still need ``yes`` or an approval); it needs a store (see
    :mod:`seamline.worktrees`). ``fallback`` names backends (``"PROVIDER[:MODEL]"``,
    :class:`~seamline.providers.failover.Fallback`, settings or provider objects) that take
    the session over, in order, when a turn fails for want of capacity (quota, overloaded;
    see :mod:`seamline.providers.failover`); it needs a store, and a sandbox encloses them too.
    ``record`` writes every model exchange of each run to a
    cassette file; ``replay`` answers them from one, with no network and no key (see
    docs/gateway.md, "Cassettes").
    """

    def __init__(
        self,
        *,
        provider: str | ProviderSettings | Provider = "offline",
        model: str | None = None,
        options: dict[str, str] | None = None,
        instructions: str | None = None,
        tools: Sequence[Tool] | Toolset = (),
        workspace: str | os.PathLike[str] | None = None,
        workspace_tools: bool | None = None,
        sandbox: SandboxMode | Sandbox | None = None,
        budget_usd: float | None = None,
        on_budget: OnBudget = "fail",
        store: SessionStore | str | os.PathLike[str] | None = None,
        max_steps: int = 50,
        observers: Sequence[Observer] = (),
        approval: Approval | None = None,
        yes: bool = False,
        builder: AgentBuilder | None = None,
        profile: AgentProfile | None = None,
        allow: Sequence[str] | None = None,
        on_notice: Callable[[str], None] | None = None,
        worktree: bool = False,
        branch: str | None = None,
        fallback: Sequence[FallbackChoice] = (),
        record: str | os.PathLike[str] | None = None,
        replay: str | os.PathLike[str] | None = None,
    ) -> None:
        if max_steps < 1:
            raise InvalidRequest("max_steps must be at least 1")
        if worktree and store is None:
            raise InvalidRequest("worktree=True needs a store (store=...): the store records the run's worktree")
        if branch is not None and not worktree:
            raise InvalidRequest("branch= names a worktree run's branch: give worktree=True too")
        if fallback and store is None:
            raise InvalidRequest("fallback= needs a store (store=...): the next backend continues from its transcript")
        self.provider = provider
        self.model = model
        self.options = dict(options or {})
        self.instructions = instructions
        self.tools: tuple[Tool, ...] = tuple(tools)
        self.workspace = Path(workspace if workspace is not None else ".")
        # Isolated tools (a sandbox, a worktree of its own) are all offered unless told otherwise.
        self.workspace_tools = bool(workspace_tools) or sandbox is not None or (worktree and workspace_tools is None)
        # A workspace named means its read tools are wanted, unless told otherwise.
        self.workspace_read_tools = workspace_tools is None and workspace is not None
        self.sandbox = sandbox
        self.budget_usd = budget_usd
        self.on_budget: OnBudget = on_budget
        self.store = store
        self.max_steps = max_steps
        self.observers = tuple(observers)
        self.approval = approval
        self.yes = yes
        self.builder = builder
        self.profile = profile
        self.allow = tuple(allow) if allow is not None else None
        self.on_notice = on_notice
        self.worktree = worktree
        self.branch = branch
        self.fallback = tuple(fallback)
        self.record = record
        self.replay = replay
        # What a run outside a worktree and a sandbox starts from: the resolved workspace and
        # the tool set on it, made at the first run and kept while the fields they come
        # from stay the same (they do not change between runs).
        self._plain: tuple[tuple[object, ...], workspace_room.Workspace, Toolset] | None = None
        backend = self._backend()
        backend.check_budget(budget_usd)  # a bad name, option or budget fails here
        check_on_budget(backend, on_budget)
        for backup in self._fallbacks():
            backup.check_budget(budget_usd)  # and so does a bad fallback

    def _backend(self) -> Provider:
        """The provider for one session: made anew from a name or settings, so its clients
        belong to the event loop that runs the session (and close with it)."""
        return self._enclosed(make_provider(self.provider, model=self.model, options=self.options), self.provider)

    def _fallbacks(self) -> list[Provider]:
        """The fallbacks for one session, made anew (as :meth:`_backend`) and enclosed alike."""
        made = fallback_backends(self.fallback)
        return [self._enclosed(backend, choice) for backend, choice in zip(made, self.fallback, strict=True)]

    def _enclosed(self, backend: Provider, choice: object) -> Provider:
        """``backend`` as this agent's sandbox wants it: one that runs its own programs runs
        them in the envelope, or is refused."""
        if self.sandbox is None or not backend.runs_own_tools:
            return backend
        mode = self.sandbox if isinstance(self.sandbox, str) else None
        if mode not in ("bwrap", "auto") or "sandbox" not in type(backend).options:
            raise SandboxViolation(
                f"sandbox={self.sandbox!r}: {backend.name} runs its own programs; seamline isolates them "
                "with sandbox='bwrap' or 'auto' (see docs/sandbox.md)"
            )
        if backend.option_values.get("sandbox") == mode:
            return backend
        if isinstance(choice, Provider):
            raise InvalidRequest(f"sandbox={mode!r} with a provider object: give it the option sandbox={mode}")
        options = {**backend.option_values, "sandbox": mode}
        return create_provider(backend.name, model=backend.model, options=options)

    def _plain_parts(self) -> tuple[workspace_room.Workspace, Toolset]:
        """The workspace and tools of a run with no worktree and no sandbox, made once."""
        key = (self.workspace, self.tools, self.workspace_tools, self.workspace_read_tools)
        kept = self._plain
        if kept is not None and kept[0] == key:
            return kept[1], kept[2]
        ws = workspace_room.Workspace(self.workspace)
        tools = self._toolset(ws)
        self._plain = (key, ws, tools)
        return ws, tools

    def _toolset(self, root: Path | workspace_room.Workspace) -> Toolset:
        ws = workspace_room.Workspace(root)
        if not self.workspace_tools:
            if not self.workspace_read_tools:
                return Toolset(self.tools, workspace=ws)
            readers = [t for t in workspace_room.workspace_tools(ws) if t.tool_class == "read"]
            return Toolset([*readers, *self.tools], workspace=ws)
        found = workspace_room.workspace_tools(ws, sandbox=self._sandbox(ws))
        for extra in self.tools:
            found.add(extra)
        return found

    def _sandbox(self, ws: workspace_room.Workspace) -> Sandbox | None:
        if self.sandbox is None or isinstance(self.sandbox, Sandbox):
            return self.sandbox
        outputs = Path(tempfile.mkdtemp(prefix="seamline-outputs-"))
        return open_sandbox(self.sandbox, workspace=ws.root, outputs=outputs)

    def _run_options(self, tree: Worktree | None = None) -> RunOptions:
        """The options of one run of this agent (a fresh provider and toolset each time),
        in ``tree`` for a worktree run."""
        sandbox = self.sandbox if isinstance(self.sandbox, str) else None
        root: Path | workspace_room.Workspace
        if tree is None and self.sandbox is None:
            root, tools = self._plain_parts()
        else:
            root = Path(tree.workspace) if tree is not None else self.workspace
            tools = self._toolset(root)
        return RunOptions(
            provider=self._backend(),
            workspace=root,
            store=self.store,
            tools=tools,
            yes=self.yes or self.sandbox is not None,  # isolated tools need no approval (as `run --sandbox`)
            approval=self.approval,
            observers=self.observers,
            max_steps=self.max_steps,
            budget_usd=self.budget_usd,
            on_budget=self.on_budget,
            builder=self.builder,
            profile=self.profile,
            allow=self.allow,
            instructions=self.instructions,
            on_notice=self.on_notice,
            stored={"sandbox": sandbox} if sandbox else None,
            worktree=tree or False,
            fallback=tuple(self._fallbacks()),
            record=self.record,
            replay=self.replay,
        )

    @asynccontextmanager
    async def _options(self) -> AsyncIterator[RunOptions]:
        """The options of one run; a worktree made for it is removed again if no session opens."""
        if not self.worktree:
            yield self._run_options()
            return
        store = self.store
        location = store.location if isinstance(store, SessionStore) else store
        tree = await asyncio.to_thread(
            worktrees.create, self.workspace, run_id=uuid.uuid4().hex, store=location, branch=self.branch
        )
        opened: list[ProviderSession] = []
        try:
            yield self._run_options(tree).replace(on_open=opened.append)
        finally:
            if not opened:
                worktrees.abandon(tree)

    async def stream(self, prompt: str, *, max_steps: int | None = None) -> AsyncIterator[Event]:
        """Run ``prompt`` as one turn on a new session and yield its events."""
        if not self.worktree:  # nothing made for the run to remove again: no context of its own
            options = self._run_options()
            if max_steps is not None:
                options = options.replace(max_steps=max_steps)
            async for event in stream_turn(prompt, options):
                yield event
            return
        async with self._options() as options:
            if max_steps is not None:
                options = options.replace(max_steps=max_steps)
            async for event in stream_turn(prompt, options):
                yield event

    async def run(self, prompt: str, *, max_steps: int | None = None) -> RunResult:
        """Run ``prompt`` as one turn on a new session and collect it."""
        if not self.worktree:  # the session's own events, without stream()'s generators around them
            options = self._run_options()
            return await run_turn(prompt, options if max_steps is None else options.replace(max_steps=max_steps))
        return await collect(self.stream(prompt, max_steps=max_steps))

    def run_sync(self, prompt: str, *, max_steps: int | None = None) -> RunResult:
        """:meth:`run` for code without an event loop."""
        return asyncio.run(self.run(prompt, max_steps=max_steps))

    @asynccontextmanager
    async def session(self, *, resume: str | None = None, fork: str | None = None) -> AsyncIterator[AgentSession]:
        """A session for several turns: new, or going on from a stored one (``resume``) or
        a copy of one (``fork``); both need a store and keep the stored instructions
        unless this agent has its own."""
        if self.worktree and (resume or fork):
            raise InvalidRequest(
                "a resumed or forked session goes on in its own workspace; use an agent without worktree=True"
            )
        async with self._options() as options, open_failover(options, resume=resume, fork=fork) as opened:
            yield AgentSession(opened, max_steps=self.max_steps, budget_usd=self.budget_usd)
