"""Run a prompt on a provider in one call: the convenience layer over the seam.

Every option of a run is a field of one frozen :class:`RunOptions`; :func:`run`,
:func:`stream`, :func:`run_sync` and :func:`open_session` take one (``options``) and/or the
same names as keywords (``**fields``, checked by type checkers against
:class:`RunFields`), which override it. A new option is a field of :class:`RunOptions`
(and its line in :class:`RunFields`, which ``tests/api/test_run_options.py`` holds
together).

>>> import seamline
>>> result = seamline.run_sync("What is seamline?", workspace=".", store=None)  # doctest: +SKIP
>>> result.outcome
'completed'
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, TypedDict, Unpack, cast

from seamline.errors import InvalidRequest, RunNotPaused, WorktreeRefused
from seamline.events import Complete, Event, Outcome, Usage
from seamline.events import Session as SessionEvent
from seamline.gateway.cassette import CassetteUse, load_cassette
from seamline.loop.messages import Message
from seamline.loop.observers import Observer
from seamline.providers.base import Provider, ProviderSession
from seamline.providers.failover import Failover, FallbackChoice, fallback_backends
from seamline.providers.pause import OnBudget, own_turns_refusal
from seamline.providers.registry import create_provider
from seamline.providers.settings import ProviderSettings
from seamline.redact import redact_url
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.rules import permission_service
from seamline.sessions.sqlite_store import open_store
from seamline.stages.builder import AgentBuilder, AgentProfile, RunParts
from seamline.tools.approval import Approval
from seamline.tools.base import Toolset
from seamline.tools.workspace import Workspace, workspace_tools
from seamline.worktrees import Worktree, abandon, continuing, create, turn_committer, worktree_of

__all__ = [
    "RunFields",
    "RunOptions",
    "RunResult",
    "check_on_budget",
    "collect",
    "make_provider",
    "open_failover",
    "open_session",
    "public_options",
    "raise_budget",
    "run",
    "run_sync",
    "session_run_options",
    "stream",
]

ProviderChoice = str | Provider | ProviderSettings
_NO_BUILDER: Final = AgentBuilder()  # a run given no builder: nothing is ever added to this one
StoreChoice = SessionStore | str | os.PathLike[str] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """Everything about a run but its prompt, in one frozen object.

    ``provider`` is a provider's name (with ``model`` and string ``options``, as on the
    CLI), typed settings, or a provider object. ``store`` is an open store or a location
    (a path or ``postgresql://`` URL) opened and closed by the run, or ``None`` for no
    record. ``tools`` replaces the workspace's tools. ``yes`` allows write and shell calls
    without asking (hard denials and stored deny rules still hold); ``approval`` replaces
    the permission service. ``builder`` brings modules, stages, tools and tool sources;
    ``profile`` may require modules and name the allowed tools; ``allow`` overrides the
    profile's allowlist; ``on_notice`` gets one-line notices (a shadowed tool, an MCP
    server left out). ``instructions`` are the system prompt. ``on_open`` hears the session
    once it is open. ``stored`` is more of the run's options to keep in the store (the
    CLI's sandbox, for one), so resume and fork reuse them. ``worktree=True`` runs in a new
    git worktree of the repository holding ``workspace``, on its own branch (``branch``,
    default ``seamline/<first 8 characters of the run id>``) beside the store, with one
    commit per turn that changed something (see :mod:`seamline.worktrees`); it needs a
    store, and tools built by the run (with ``tools=``, pass a
    :class:`~seamline.worktrees.Worktree` made by :func:`seamline.worktrees.create` instead).
    ``fallback`` names backends (``"PROVIDER[:MODEL]"``, a :class:`~seamline.providers.failover.Fallback`,
    settings or a provider object) that take the session over, in order, when a turn fails
    for want of capacity (see :mod:`seamline.providers.failover`); it needs a store.
    """

    provider: ProviderChoice = "offline"
    model: str | None = None
    options: Mapping[str, str] | None = None
    workspace: str | os.PathLike[str] = "."
    store: StoreChoice = None
    tools: Toolset | None = None
    yes: bool = False
    approval: Approval | None = None
    observers: Sequence[Observer] = ()
    max_steps: int = 50
    budget_usd: float | None = None
    on_budget: OnBudget = "fail"
    """What a spent ``budget_usd`` does: ``fail`` ends the turn ``budget``; ``pause`` stops
    it before its next model request with status ``paused``, to go on once the budget is
    raised (:func:`raise_budget`, ``seamline runs raise``). ``pause`` needs a backend whose
    model requests seamline's loop makes (a model API, ``scripted``, ``offline``)."""
    builder: AgentBuilder | None = None
    profile: AgentProfile | None = None
    allow: Sequence[str] | None = None
    instructions: str | None = None
    on_open: Callable[[ProviderSession], None] | None = None
    on_notice: Callable[[str], None] | None = None
    stored: Mapping[str, object] | None = None
    worktree: bool | Worktree = False
    branch: str | None = None
    fallback: Sequence[FallbackChoice] = ()
    record: str | os.PathLike[str] | None = None
    """Record every model exchange of the session to this cassette file (JSON Lines; see
    docs/gateway.md, "Cassettes")."""
    replay: str | os.PathLike[str] | None = None
    """Answer every model request from this cassette instead of the model API: nothing
    leaves the gateway, no key is needed; a request that matches none fails the turn."""

    def replace(self, **fields: Unpack[RunFields]) -> RunOptions:
        """A copy with ``fields`` changed."""
        return dataclasses.replace(self, **fields) if fields else self


class RunFields(TypedDict, total=False):
    """The fields of :class:`RunOptions`, as keyword arguments (for type checkers)."""

    provider: ProviderChoice
    model: str | None
    options: Mapping[str, str] | None
    workspace: str | os.PathLike[str]
    store: StoreChoice
    tools: Toolset | None
    yes: bool
    approval: Approval | None
    observers: Sequence[Observer]
    max_steps: int
    budget_usd: float | None
    on_budget: OnBudget
    builder: AgentBuilder | None
    profile: AgentProfile | None
    allow: Sequence[str] | None
    instructions: str | None
    on_open: Callable[[ProviderSession], None] | None
    on_notice: Callable[[str], None] | None
    stored: Mapping[str, object] | None
    worktree: bool | Worktree
    branch: str | None
    fallback: Sequence[FallbackChoice]
    record: str | os.PathLike[str] | None
    replay: str | os.PathLike[str] | None


def _given(options: RunOptions | None, fields: RunFields) -> RunOptions:
    return (options or RunOptions()).replace(**fields)


@dataclass(slots=True)
class RunResult:
    """What a finished turn gave."""

    session_id: str
    outcome: Outcome
    stop_reason: str
    text: str
    events: list[Event] = field(default_factory=list)
    cost_usd: float | None = 0.0
    input_tokens: int = 0
    output_tokens: int = 0


@asynccontextmanager
async def open_session(
    options: RunOptions | None = None,
    /,
    *,
    resume: str | None = None,
    fork: str | None = None,
    **fields: Unpack[RunFields],
) -> AsyncIterator[ProviderSession]:
    """Open a session (new, or ``resume``/``fork`` of a stored one) for any number of
    turns, and close it, its tool sources and a store opened here, on the way out.

    A resumed or forked session gets the instructions it was started with (kept in the
    store's run options) unless ``instructions`` gives others. A worktree run (new, or
    resumed) commits each turn's changes on its branch before the turn's ``complete``.
    A session with fallbacks is opened by :func:`open_failover`.
    """
    given = _given(options, fields)
    if given.fallback:
        raise InvalidRequest("a session with fallback= is opened by open_failover(), which hands it over")
    async with _opened(given, resume=resume, fork=fork) as session:
        yield session


@asynccontextmanager
async def open_failover(
    options: RunOptions | None = None,
    /,
    *,
    resume: str | None = None,
    fork: str | None = None,
    **fields: Unpack[RunFields],
) -> AsyncIterator[ProviderSession | Failover]:
    """:func:`open_session` for a run that may have fallbacks: without them, the session;
    with them, a :class:`~seamline.providers.failover.Failover` over it (``send`` and
    ``session_id`` as the session's), which hands the session over to the next fallback
    when a turn fails for want of capacity. The fallbacks are checked before anything opens."""
    given = _given(options, fields)
    backups = fallback_backends(given.fallback, budget_usd=given.budget_usd)
    if backups and given.store is None:
        raise InvalidRequest("fallback= needs a store (store=...): the next backend continues from its transcript")
    async with _opened(given, resume=resume, fork=fork) as session:
        if not backups:
            yield session
            return
        failover = Failover(session, backups, on_open=_reopened(session, given.on_open))
        try:
            yield failover
        finally:
            await failover.aclose()


def _reopened(
    first: ProviderSession, on_open: Callable[[ProviderSession], None] | None
) -> Callable[[ProviderSession], None]:
    """What a session a failover opened is met with: the store keeps its backend's options
    (``run --session`` goes on with them), and the run's ``on_open`` hears of it."""

    def met(session: ProviderSession) -> None:
        if first.store is not None:
            first.store.set_run_options(
                session.session_id, {"provider_options": public_options(session.provider) or None}
            )
        if on_open is not None:
            on_open(session)

    return met


@asynccontextmanager
async def _opened(given: RunOptions, *, resume: str | None, fork: str | None) -> AsyncIterator[ProviderSession]:
    backend = make_provider(given.provider, model=given.model, options=given.options)
    backend.check_budget(given.budget_usd)  # before a session opens: an unenforceable budget is refused
    check_on_budget(backend, given.on_budget)
    _check_cassette(given, backend)
    store = given.store
    if store is not None and not isinstance(store, SessionStore | str | os.PathLike):
        raise InvalidRequest(f"store= takes an open store, a path or a postgresql:// URL, not {store!r}")
    if (resume or fork) and store is None:
        raise InvalidRequest("resume and fork need a store (store=...)")
    if resume and fork:
        raise InvalidRequest("give resume= or fork=, not both")
    _check_worktree(given, resumed=bool(resume or fork))
    # (an agent gives its Workspace, resolved once: taken as it is)
    ws = given.workspace if isinstance(given.workspace, Workspace) else Workspace(given.workspace)
    kept: SessionStore | None = open_store(store) if isinstance(store, (str, os.PathLike)) else store
    owned = kept if isinstance(store, (str, os.PathLike)) else None  # opened here, closed here
    made: Worktree | None = None  # a worktree made here, removed again if no session opens
    try:
        tree = given.worktree if isinstance(given.worktree, Worktree) else None
        if kept is not None and (resume or fork):
            tree = _carried(kept, resume=resume, fork=fork)  # a resumed worktree run goes on in its worktree
        elif given.worktree is True and kept is not None:
            where = kept.location
            tree = made = await asyncio.to_thread(
                create, given.workspace, run_id=uuid.uuid4().hex, store=where, branch=given.branch
            )
        if tree is not None:
            ws = Workspace(tree.workspace)
        host = given.tools if given.tools is not None else workspace_tools(ws)
        # (one context for the whole run, not one per layer: fewer objects per run in flight)
        async with (given.builder or _NO_BUILDER).open_run(
            host=host, profile=given.profile, allow=given.allow, workspace=ws.root, report=given.on_notice
        ) as parts:
            session, started = await _started(given, backend, kept, ws, tree, parts, resume=resume, fork=fork)
            session.on_budget = given.on_budget
            try:
                if tree is not None:
                    session.turn_hooks.append(turn_committer(tree))
                if kept is not None and (resume or fork) and started:
                    kept.set_run_options(session.session_id, started)
                if given.on_open is not None:
                    given.on_open(session)
                made = None  # the session is recorded and opened: its worktree is the run's now
                yield session
            finally:
                await backend.close(session)
    finally:
        if made is not None:
            abandon(made)  # on the way out of a failed open, perhaps cancelled: no await here
        if owned is not None:
            owned.close()


def check_on_budget(backend: Provider, on_budget: str) -> None:
    """Refuse, before anything starts, an ``on_budget`` that is not one, or ``pause`` for a
    backend that runs its own turns (an agent CLI: seamline cannot stop it between requests
    and go on from there)."""
    if on_budget not in ("fail", "pause"):
        raise InvalidRequest(f"on_budget is 'fail' or 'pause', not {on_budget!r}")
    if on_budget == "pause" and backend.runs_own_tools:
        raise own_turns_refusal(backend.name)


def _check_cassette(given: RunOptions, backend: Provider) -> None:
    """A cassette is for a backend whose model requests pass the gateway (else a replay
    would reach the network and a recording would hold nothing)."""
    use = CassetteUse.of(record=given.record, replay=given.replay)
    if use is None:
        return
    # (a model-API provider's requests pass it when a cassette is given; an ACP agent's
    # where its vendor is known: its session says so when it opens)
    if type(backend).keys not in ("gateway", "gateway_or_environment", "in_process"):
        raise InvalidRequest(
            f"cassette {use.path}: {backend.name}'s model requests do not pass seamline's gateway "
            f"(keys={type(backend).keys}; see seamline providers list), so they cannot be recorded or replayed"
        )
    if use.mode == "replay":
        load_cassette(use.path)  # a file that is not a cassette fails here, before anything starts


def _carried(store: SessionStore, *, resume: str | None, fork: str | None) -> Worktree | None:
    """The worktree a resumed run goes on in; forking a worktree run is refused."""
    record = store.require(resume or fork or "")
    if fork and worktree_of(record) is not None:
        raise WorktreeRefused(f"run {record.id[:12]} has a worktree; forking a worktree run is not supported")
    return continuing(record)


def _check_worktree(given: RunOptions, *, resumed: bool) -> None:
    if given.worktree is False:
        if given.branch is not None:
            raise InvalidRequest("branch= names a worktree run's branch: give worktree=True too")
        return
    if resumed:
        raise InvalidRequest("a resumed or forked session goes on in its own workspace: drop worktree=")
    if given.store is None:
        raise InvalidRequest("worktree=True needs a store (store=...): the store records the run's worktree")
    if given.worktree is True and given.tools is not None:
        raise InvalidRequest(
            "worktree=True builds the run's tools in its worktree; with tools=, pass "
            "worktree=seamline.worktrees.create(...) and tools built on its workspace"
        )


async def _started(
    given: RunOptions,
    backend: Provider,
    kept: SessionStore | None,
    ws: Workspace,
    tree: Worktree | None,
    parts: RunParts,
    *,
    resume: str | None,
    fork: str | None,
) -> tuple[ProviderSession, dict[str, object]]:
    """The session opened (new, resumed or forked) with the run's parts, and the run options
    to keep for it."""
    instructions = given.instructions
    use = CassetteUse.of(record=given.record, replay=given.replay)
    permits = given.approval or permission_service(store=kept, workspace=ws, yes=given.yes)
    observing = (*given.observers, *parts.observers)
    earlier = resume or fork
    if kept is not None and earlier:
        if instructions is None:
            instructions = kept.require(earlier).run_options.get("system_prompt")
        if fork:
            session = await backend.fork(fork, store=kept, tools=parts.tools, observers=observing, approval=permits)
        else:
            session = await backend.resume(
                earlier, store=kept, tools=parts.tools, observers=observing, approval=permits
            )
        if instructions and not (session.messages and session.messages[0].role == "system"):
            session.messages.insert(0, Message(role="system", content=instructions))
        session.cassette = use
    started: dict[str, object] = {}
    if kept is not None:
        extra = {**(given.stored or {}), **({"worktree": tree.record()} if tree and not earlier else {})}
        if given.on_budget != "fail":
            extra["on_budget"] = given.on_budget
        started = session_run_options(
            backend, budget_usd=given.budget_usd, allow=given.allow, instructions=instructions, extra=extra
        )
    if not (kept is not None and earlier):
        session = await backend.open(
            workspace=ws,
            store=kept,
            tools=parts.tools,
            observers=observing,
            approval=permits,
            stages=parts.stages if parts.stages else None,
            system_prompt=instructions,
            session_id=tree.run_id if tree is not None else None,
            run_options=started or None,  # in the record's own commit: no transaction of its own
            cassette=use,
        )
    return session, started


def make_provider(
    provider: str | Provider | ProviderSettings, *, model: str | None, options: Mapping[str, str] | None
) -> Provider:
    """A provider object from a name (with ``model`` and string ``options``), typed settings
    (``model`` overrides theirs), or a provider object as it is."""
    if isinstance(provider, Provider):
        return provider
    if isinstance(provider, ProviderSettings):
        if options:
            raise InvalidRequest("give the options in the settings object, not options=")
        return (provider if model is None else dataclasses.replace(provider, model=model)).create()
    return create_provider(provider, model=model, options=options)


async def stream(
    prompt: str, options: RunOptions | None = None, /, **fields: Unpack[RunFields]
) -> AsyncIterator[Event]:
    """Open a session, run one turn, stream its events, close the session.

    ``options`` and ``fields`` are those of :class:`RunOptions`. Tool sources (MCP
    servers) open before the session and close after it. The session keeps its options in
    the store (provider options without secrets, ``budget_usd``, ``allow``, the
    instructions, and ``stored``): ``run --session``, ``sessions resume`` and ``fork``
    reuse them.
    """
    given = _given(options, fields)
    # without fallbacks, the session itself (one context less kept for the run's length)
    opening = open_failover(given) if given.fallback else _opened(given, resume=None, fork=None)
    async with opening as session:
        async for event in session.send(prompt, max_steps=given.max_steps, budget_usd=given.budget_usd):
            yield event


_SECRET_WORDS: Final = ("key", "token", "secret", "password", "passwd", "auth", "cookie", "credential")


def public_options(provider: Provider) -> dict[str, str]:
    """The options given to ``provider`` (not its defaults) that are safe to keep: never
    one whose name says secret (``api_key``, ``token``…; ``*_env`` names a variable and is
    kept), and never a password inside a URL."""
    kept: dict[str, str] = {}
    for name, value in provider.option_values.items():
        spec = provider.options.get(name)
        if spec is not None and spec.default is not None and value == spec.default:
            continue
        lowered = name.lower()
        if any(word in lowered for word in _SECRET_WORDS) and not lowered.endswith("_env"):
            continue
        kept[name] = _without_password(value)
    return kept


def _without_password(value: str) -> str:
    return redact_url(value)


def session_run_options(
    provider: Provider,
    *,
    budget_usd: float | None = None,
    allow: Sequence[str] | None = None,
    instructions: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """What a session is started with, to keep in the store (secret-free); resume and
    fork reuse it. Empty values are left out."""
    found: dict[str, Any] = {
        "provider_options": public_options(provider),
        "budget_usd": budget_usd,
        "allow": list(allow) if allow else None,
        "system_prompt": instructions,  # the stored name of the instructions
        **(extra or {}),
    }
    return {k: v for k, v in found.items() if v not in (None, {}, [], "")}


async def collect(events: AsyncIterator[Event]) -> RunResult:
    """A turn's events gathered into a :class:`RunResult`."""
    kept: list[Event] = []
    session_id = ""
    cost: float | None = 0.0
    tokens_in = tokens_out = 0
    final = Complete(outcome="failed", stop_reason="no_result")
    async for event in events:
        kept.append(event)
        if isinstance(event, SessionEvent):
            session_id = event.session_id
        elif isinstance(event, Usage):
            tokens_in += event.input_tokens
            tokens_out += event.output_tokens
            cost = None if cost is None or event.cost_usd is None else cost + event.cost_usd
        elif isinstance(event, Complete):
            final = event
    return RunResult(
        session_id=session_id,
        outcome=final.outcome,
        stop_reason=final.stop_reason,
        text=final.text,
        events=kept,
        cost_usd=cost,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
    )


async def run(prompt: str, options: RunOptions | None = None, /, **fields: Unpack[RunFields]) -> RunResult:
    """Run one turn and collect it; the options are those of :class:`RunOptions`."""
    given = _given(options, fields)
    if given.fallback:
        return await collect(stream(prompt, given))
    async with _opened(given, resume=None, fork=None) as session:  # the session's own events, no generator around
        return await collect(session.send(prompt, max_steps=given.max_steps, budget_usd=given.budget_usd))


async def raise_budget(
    run_id: str,
    *,
    budget_usd: float,
    store: SessionStore | str | os.PathLike[str],
    options: RunOptions | None = None,
) -> AsyncIterator[Event]:
    """Raise the budget of the stored run ``run_id`` that paused at it (``on_budget="pause"``)
    to ``budget_usd`` in all, and go on with it from its stored conversation: no finished
    model request or tool call runs again. The run's backend (provider, model, stored
    options) is the one it was started with unless ``options`` names another; a run that is
    not paused fails :class:`~seamline.errors.RunNotPaused` before anything runs.

    >>> async for event in seamline.raise_budget(run_id, budget_usd=0.5, store="runs.db"):  # doctest: +SKIP
    ...     print(event)
    """
    given = options or RunOptions()
    kept = open_store(store) if isinstance(store, (str, os.PathLike)) else store
    try:
        record = kept.require(run_id)
        if record.status != "paused":
            raise RunNotPaused(
                f"run {record.id} is not paused at its budget (status: {record.status}); nothing to raise"
            )
        stored = record.run_options
        if not isinstance(given.provider, Provider | ProviderSettings) and given.provider == "offline":
            kept_options: object = stored.get("provider_options")
            before: Mapping[str, object] = (
                cast(Mapping[str, object], kept_options) if isinstance(kept_options, Mapping) else {}
            )
            given = given.replace(
                provider=record.provider,
                model=given.model or record.model,
                options=given.options or {str(k): str(v) for k, v in before.items()},
            )
        if record.workspace and str(given.workspace) == ".":
            given = given.replace(workspace=record.workspace)  # its tools work where it ran
        given = given.replace(store=kept, on_budget="pause")
        async with _opened(given, resume=record.id, fork=None) as session:
            async for event in session.continue_paused(budget_usd=budget_usd, max_steps=given.max_steps):
                yield event
    finally:
        if kept is not store:
            kept.close()


def run_sync(prompt: str, options: RunOptions | None = None, /, **fields: Unpack[RunFields]) -> RunResult:
    """:func:`run` for code without an event loop."""
    return asyncio.run(run(prompt, _given(options, fields)))
