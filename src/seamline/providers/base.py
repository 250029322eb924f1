"""The provider seam.

A backend is one subclass of :class:`Provider` plus one registry entry. The public
verbs (``preflight``, ``open``, ``resume``, ``fork``, ``ProviderSession.send``, ``abort``,
``close``, ``seed``, ``transcript_location``, ``configured_model``, ``rates``) validate,
emit events and keep the settle invariants; a subclass implements only the ``_`` hooks
and declares its capabilities as class attributes.

Settle invariants, enforced by ``send`` (with :mod:`seamline.providers.settle`) whatever a hook does:

- every turn starts with a ``session`` event and ends with exactly one ``complete``;
- nothing is emitted after ``complete``;
- the provider's session id is captured once, stored, and never silently replaced;
- a usage figure is counted once (a repeated ``usage_id`` is dropped);
- the raw log holds every input and output, flushed before ``complete`` is emitted.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Final, Literal

import msgspec

from seamline.errors import InvalidRequest, PermissionDenied, ProviderFailure, SeamlineError
from seamline.events import (
    Complete,
    Error,
    Event,
    Session,
    TextDelta,
    ToolCall,
    Usage,
)
from seamline.gateway.cassette import CassetteUse
from seamline.loop.kernel import LoopConfig, StepInterrupt, run_agent_loop
from seamline.loop.messages import Message, ModelRequest
from seamline.loop.observers import Observer
from seamline.providers.option_kinds import OptionKind, option_problem
from seamline.providers.pause import (
    BudgetPause,
    OnBudget,
    checked_raise,
    forget_pause,
    own_turns_refusal,
    pause_gate,
    pause_notice,
    stored_pause,
)
from seamline.providers.settle import TurnSettler
from seamline.sessions.handoffs import handoff_entry
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.records import SessionRecord, TranscriptEntry
from seamline.stages.chain import StageChain
from seamline.tools.approval import Approval
from seamline.tools.base import Toolset
from seamline.tools.workspace import resolved_folder
from seamline.usage import Rates, UsageTotals, price_usage

__all__ = [
    "BLOCK_ENV",
    "Capabilities",
    "OptionSpec",
    "PreflightCheck",
    "Provider",
    "ProviderSession",
    "TurnHook",
    "KeyPath",
    "TurnTotals",
]

BLOCK_ENV: Final = "SEAMLINE_BLOCK_REAL_PROVIDERS"
_Params = Mapping[str, object] | None

Forking = Literal["native", "emulated", "none"]
IdMinter = Literal["provider", "seamline"]
CostScope = Literal["step", "turn", "session"]
CostSource = Literal["reported", "priced", "free", "script"]
BudgetEnforcement = Literal["native", "seamline"]
ResultCadence = Literal["stream", "turn"]
# Which of an agent's own tool calls seamline's permission service decides: every one, the
# ones the agent asks about, or none (only the sandbox bounds the agent).
ToolApproval = Literal["every_call", "asked", "sandbox"]
# Where the backend's API key is: behind seamline's model gateway (the program has a
# placeholder), in the program's environment (its shell can read it), in seamline's own
# process (a model API seamline calls itself), or nowhere (no model). ``gateway_or_environment``:
# behind the gateway where seamline knows how the program reaches its API (an ACP agent's
# vendor, OpenCode's provider), else in its environment, and the session says so.
KeyPath = Literal["gateway", "gateway_or_environment", "environment", "in_process", "none"]
# Awaited at the end of each turn with its number and its `complete` (ProviderSession.turn_hooks).
TurnHook = Callable[[int, Complete], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """A ``--provider-option`` a provider accepts."""

    help: str
    default: str | None = None
    choices: tuple[str, ...] = ()
    kind: OptionKind = "text"  # checked when the provider is made (see option_kinds)
    operator_only: bool = False
    """It names a program or a path to run (or config that can), or where the process's
    credentials go (an endpoint, a key's variable): ``seamline serve`` takes it from its
    operator's ``--agents`` file, never from an HTTP client."""


@dataclass(frozen=True, slots=True)
class PreflightCheck:
    """One readiness probe: what was checked, whether it passed, and the fix if not."""

    name: str
    ok: bool
    detail: str = ""
    fix: str | None = None


class Capabilities(msgspec.Struct, frozen=True, kw_only=True):
    """What a provider can do, read from its class attributes."""

    forking: Forking
    session_ids: IdMinter
    cost_scope: CostScope
    cost_source: CostSource
    budget: BudgetEnforcement
    result_cadence: ResultCadence
    routes: tuple[str, ...]
    runs_own_tools: bool
    tool_approval: ToolApproval
    keys: KeyPath
    resume: Literal["native", "emulated", "none"]
    mcp_transports: tuple[str, ...]
    attachments: tuple[str, ...]
    real: bool


TurnTotals = UsageTotals  # sums over one turn, as the base counted them


class Provider:
    """Base of every backend. Subclasses set the class attributes and the ``_`` hooks.

    A provider that leaves tools to seamline implements :meth:`_step` (one model call);
    one that runs its own tools (an agent CLI) sets ``runs_own_tools = True`` and
    implements :meth:`_turn`.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    default_model: ClassVar[str | None] = None
    options: ClassVar[Mapping[str, OptionSpec]] = {}
    # capabilities
    forking: ClassVar[Forking] = "emulated"
    session_ids: ClassVar[IdMinter] = "seamline"
    cost_scope: ClassVar[CostScope] = "step"
    cost_source: ClassVar[CostSource] = "priced"
    budget: ClassVar[BudgetEnforcement] = "seamline"
    result_cadence: ClassVar[ResultCadence] = "stream"
    routes: ClassVar[tuple[str, ...]] = ("default",)
    runs_own_tools: ClassVar[bool] = False
    tool_approval: ClassVar[ToolApproval] = "every_call"
    keys: ClassVar[KeyPath] = "in_process"
    #: The variables of seamline's environment the gateway takes this backend's key from
    #: (``providers list``); () where no gateway holds a key for it.
    gateway_key_vars: ClassVar[tuple[str, ...]] = ()
    #: A login the program keeps in its own files and refreshes itself, as its user knows it
    #: (``providers list``): the gateway cannot hold it, so a session with only that login
    #: (none of :attr:`gateway_key_vars` set) runs with the gateway off. None: no such login.
    stored_login: ClassVar[str | None] = None
    resume_support: ClassVar[Literal["native", "emulated", "none"]] = "emulated"
    mcp_transports: ClassVar[tuple[str, ...]] = ()
    attachments: ClassVar[tuple[str, ...]] = ()
    real: ClassVar[bool] = True  # calls something outside this process

    def __init__(self, *, model: str | None = None, options: Mapping[str, str] | None = None) -> None:
        given = dict(options or {})
        unknown = sorted(set(given) - set(self.options)) if given else []
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise InvalidRequest(f"unknown option(s) for provider {self.name}: {', '.join(unknown)} (known: {known})")
        for key, value in given.items():
            spec = self.options[key]
            if spec.choices and value not in spec.choices:
                raise InvalidRequest(f"option {key}={value!r} for {self.name}: choose one of {', '.join(spec.choices)}")
            problem = option_problem(spec.kind, value) if value or spec.default is not None else None
            if problem:
                raise InvalidRequest(f"option {key}={value!r} for {self.name}: {problem}")
        self.option_values: dict[str, str] = {k: v.default for k, v in self.options.items() if v.default is not None}
        self.option_values.update(given)
        self.model = model or self.configured_model()

    # -- capabilities ---------------------------------------------------------------------
    @classmethod
    def capabilities(cls) -> Capabilities:
        return Capabilities(
            forking=cls.forking,
            session_ids=cls.session_ids,
            cost_scope=cls.cost_scope,
            cost_source=cls.cost_source,
            budget=cls.budget,
            result_cadence=cls.result_cadence,
            routes=cls.routes,
            runs_own_tools=cls.runs_own_tools,
            tool_approval=cls.tool_approval,
            keys=cls.keys,
            resume=cls.resume_support,
            mcp_transports=cls.mcp_transports,
            attachments=cls.attachments,
            real=cls.real,
        )

    # -- public verbs ---------------------------------------------------------------------
    async def preflight(self) -> list[PreflightCheck]:
        """Probe readiness before a run commits; never raises for a failed probe."""
        try:
            return list(await self._preflight())
        except SeamlineError as exc:
            return [PreflightCheck(name=self.name, ok=False, detail=f"{exc.kind}: {exc.message}")]

    async def open(
        self,
        *,
        workspace: str | os.PathLike[str] | None = None,
        store: SessionStore | None = None,
        tools: Toolset | None = None,
        observers: Sequence[Observer] = (),
        approval: Approval | None = None,
        session_id: str | None = None,
        parent_id: str | None = None,
        mode: Literal["planning", "agent"] = "agent",
        metadata: Mapping[str, object] | None = None,
        system_prompt: str | None = None,
        stages: StageChain | None = None,
        run_options: Mapping[str, object] | None = None,
        cassette: CassetteUse | None = None,
    ) -> ProviderSession:
        """Start a new session; the record is written before any turn runs, with
        ``run_options`` (what :meth:`SessionStore.set_run_options` keeps) in its commit.
        A session that replays a ``cassette`` needs no key and calls nothing real (nothing
        leaves its gateway), so ``SEAMLINE_BLOCK_REAL_PROVIDERS`` lets it run."""
        if cassette is None or cassette.mode != "replay":
            self._check_allowed()
            self._ready()
        sid = session_id or new_session_id()
        session = ProviderSession(
            provider=self,
            session_id=sid,
            workspace=resolved_folder(workspace) if workspace is not None else None,
            store=store,
            tools=tools or Toolset(),
            observers=tuple(observers),
            approval=approval,
            parent_id=parent_id,
            stages=stages,
            cassette=cassette,
        )
        if system_prompt:
            session.messages.append(Message(role="system", content=system_prompt))
        if store is not None:
            await store.create_session_grouped(
                sid,
                provider=self.name,
                model=self.model,
                parent_id=parent_id,
                workspace=str(session.workspace) if session.workspace else None,
                mode=mode,
                metadata=metadata,
                run_options=run_options,
            )
        try:
            await self._open(session)
        except BaseException:
            if store is not None:
                store.delete_session(sid)  # nothing started: no record left to be taken for a dead run
            raise
        return session

    async def resume(
        self,
        session_id: str,
        *,
        store: SessionStore,
        tools: Toolset | None = None,
        observers: Sequence[Observer] = (),
        approval: Approval | None = None,
        handoff: bool = False,
    ) -> ProviderSession:
        """Continue a stored session: natively where the provider can, else emulated.

        Emulated resume gives the provider the earlier conversation as context; the
        record's metadata says which happened. A provider that cannot resume at all fails
        with a classified error rather than silently starting fresh.

        ``handoff=True`` continues another provider's session on this one: the canonical
        transcript is its history (an emulated resume), the switch is recorded in the
        session (``metadata["handoffs"]``: from which provider and model, after which turn
        and message), and the session is this provider's from then on.
        """
        self._check_allowed()
        self._ready()
        record = store.require(session_id)
        handing = handoff and record.provider != self.name
        if record.provider != self.name and not handing:
            raise InvalidRequest(
                f"session {record.id} belongs to provider {record.provider}, not {self.name} "
                "(to continue it here, hand it over: run --session ID --provider NAME)"
            )
        how = self.resume_support
        if how == "none":
            raise InvalidRequest(f"provider {self.name} cannot resume a session (capability resume=none)")
        if handing:
            store.hand_over(record.id, provider=self.name, model=self.model)
            record = store.require(record.id)
        if how == "native" and not record.provider_session_id:
            how = "emulated"  # the provider never told us its id; the history is all we have
        session = self._session_from_record(record, store, tools, observers, approval)
        session.resumed = how
        store.update_metadata(record.id, {"last_resume": how})
        if how == "native":
            await self._resume(session)
        else:
            await self._open(session)
        return session

    async def fork(
        self,
        session_id: str,
        *,
        store: SessionStore,
        at: int | None = None,
        tools: Toolset | None = None,
        observers: Sequence[Observer] = (),
        approval: Approval | None = None,
        handoff: bool = False,
    ) -> ProviderSession:
        """A new session that starts from ``session_id``'s history (up to message ``at``).

        Native where the provider can fork and the fork is from the latest message;
        otherwise emulated: the history up to ``at`` is copied and the parent recorded.
        ``handoff=True`` forks another provider's session onto this one (emulated; the
        fork's ``metadata["handoffs"]`` names the provider it came from).
        """
        if self.forking == "none":
            # Before the key check: a missing key is worth fixing only for what can work.
            raise _cannot_fork(self.name, session_id)
        self._check_allowed()
        self._ready()
        record = store.require(session_id)
        handing = handoff and record.provider != self.name
        if record.provider != self.name and not handing:
            raise InvalidRequest(f"session {record.id} belongs to provider {record.provider}, not {self.name}")
        entries = store.transcript(record.id)
        if at is not None and not 0 <= at < len(entries):
            raise InvalidRequest(f"--at {at} is outside the session's {len(entries)} messages (0..{len(entries) - 1})")
        native = self.forking == "native" and at is None and bool(record.provider_session_id) and not handing
        new_id = new_session_id()
        metadata: dict[str, object] = {"fork_of": record.id, "fork": "native" if native else "emulated", "fork_at": at}
        if handing:
            metadata["handoffs"] = [
                handoff_entry(
                    record, entries if at is None else entries[: at + 1], provider=self.name, model=self.model
                )
            ]
        store.create_session(
            new_id,
            provider=self.name,
            model=self.model,
            parent_id=record.id,
            workspace=record.workspace,
            mode=record.mode,
            metadata=metadata,
        )
        _copy_history(store, new_id, entries if at is None else entries[: at + 1])
        fork_record = store.require(new_id)
        session = self._session_from_record(fork_record, store, tools, observers, approval)
        session.forked_from = record
        if native:
            session.state["fork_from_provider_session_id"] = record.provider_session_id
            await self._fork(session, record)
        else:
            session.resumed = "emulated"
            await self._open(session)
        return session

    def _session_from_record(
        self,
        record: SessionRecord,
        store: SessionStore,
        tools: Toolset | None,
        observers: Sequence[Observer],
        approval: Approval | None,
    ) -> ProviderSession:
        entries = store.transcript(record.id)
        session = ProviderSession(
            provider=self,
            session_id=record.id,
            workspace=Path(record.workspace) if record.workspace else None,
            store=store,
            tools=tools or Toolset(),
            observers=tuple(observers),
            approval=approval,
            parent_id=record.parent_id,
            provider_session_id=record.provider_session_id,
            messages=messages_from_transcript(entries),
            turn=max((e.turn for e in entries), default=0),
        )
        session.history = entries
        return session

    async def abort(self, session: ProviderSession) -> None:
        """Ask the running turn to stop; it ends with outcome ``aborted``."""
        session.aborted = True
        if session.step_interrupt is not None:
            session.step_interrupt.interrupt()  # a model call that waits ends now, not at its next byte
        await self._abort(session)

    async def close(self, session: ProviderSession) -> None:
        try:
            await self._close(session)
        finally:
            while session.closers:
                session.closers.pop()()  # what the session held open (its edit journal)
            store = session.store
            if store is not None:
                if session.turn == 0:
                    # Opened but never sent a prompt: not a run that died (`interrupted`).
                    store.set_status(session.session_id, "not_started")
                store.flush_soon()  # durable now, in the store with the next runs' commit
                store.release(session.session_id)

    def seed(self, node_dir: Path, parent_dir: Path | None = None) -> None:
        """Materialise this provider's configuration in a new node directory."""
        node_dir.mkdir(parents=True, exist_ok=True)
        self._seed(node_dir, parent_dir)

    def transcript_location(self, session: ProviderSession) -> Path | None:
        return self._transcript_location(session)

    def configured_model(self) -> str | None:
        return self._configured_model() or self.default_model

    def rates(self, model: str | None) -> Rates | None:
        return self._rates(model)

    def check_budget(self, budget_usd: float | None) -> None:
        """Refuse, before anything starts, a budget in USD that cannot be enforced: not a
        finite amount of 0 or more, or a model whose tokens this provider prices but for
        which no price is known (its cost would stay unknown and the budget never bite)."""
        if budget_usd is None:
            return
        if not math.isfinite(budget_usd) or budget_usd < 0:
            raise InvalidRequest(f"the budget must be a finite amount of USD, 0 or more (got {budget_usd})")
        if self.cost_source != "priced" or self.rates(self.model) is not None:
            return
        probe = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
        if self.model is None or price_usage(probe, model=self.model) is None:
            raise InvalidRequest(
                f"no price is known for model {self.model!r} of {self.name}, so a budget in USD cannot be "
                "enforced; choose a priced model or drop the budget"
            )

    # -- hooks ------------------------------------------------------------------------------
    async def _preflight(self) -> Sequence[PreflightCheck]:
        return [PreflightCheck(name=self.name, ok=True, detail="no checks needed")]

    async def _open(self, session: ProviderSession) -> None:
        return None

    def _step(self, request: ModelRequest) -> AsyncIterator[Event]:
        raise NotImplementedError(f"{type(self).__name__} implements neither _step nor _turn")

    def _turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        raise NotImplementedError(f"{type(self).__name__} runs its own tools but has no _turn")

    async def _resume(self, session: ProviderSession) -> None:
        """Native resume: ``session.provider_session_id`` is the provider's id to continue."""
        await self._open(session)

    async def _fork(self, session: ProviderSession, parent: SessionRecord) -> None:
        """Native fork of ``parent`` (its provider id is in ``session.state``)."""
        await self._open(session)

    async def _abort(self, session: ProviderSession) -> None:
        return None

    async def _close(self, session: ProviderSession) -> None:
        return None

    def _seed(self, node_dir: Path, parent_dir: Path | None) -> None:
        return None

    def _transcript_location(self, session: ProviderSession) -> Path | None:
        return None

    def _configured_model(self) -> str | None:
        return None

    def _rates(self, model: str | None) -> Rates | None:
        return None

    def _ready(self) -> None:
        """Cheap checks (no process, no network) that a session could work at all, made
        before anything is recorded: a missing key fails here in a moment as ``auth``,
        with the fix, rather than after a program's own retries. Default: none."""
        return None

    def _check_allowed(self) -> None:
        if self.real and os.environ.get(BLOCK_ENV, "") not in ("", "0"):
            raise PermissionDenied(
                f"provider {self.name} would call a real backend, and {BLOCK_ENV} forbids that (tests)"
            )


def _cannot_fork(provider: str, session_id: str) -> InvalidRequest:
    return InvalidRequest(
        f"provider {provider} cannot fork a session (capability forking=none); continue it instead "
        f"(seamline run --session {session_id} --provider {provider} PROMPT), or fork it on a provider "
        f"that can (seamline sessions fork {session_id} --provider NAME; see seamline providers list)"
    )


def _provider_bug(name: str, exc: Exception) -> tuple[Error, Complete]:
    """The classified failure of a provider that raised something not seamline's own."""
    failure = ProviderFailure(f"provider {name} failed mid-stream: {type(exc).__name__}: {exc}")
    return failure.to_event(), Complete(outcome="failed", stop_reason="provider_error")


@dataclass(eq=False)
class ProviderSession:
    """An open session of one provider: the handle every turn goes through."""

    provider: Provider
    session_id: str
    workspace: Path | None
    store: SessionStore | None
    tools: Toolset
    observers: tuple[Observer, ...] = ()
    approval: Approval | None = None
    parent_id: str | None = None
    provider_session_id: str | None = None
    messages: list[Message] = field(default_factory=list)
    turn: int = 0
    aborted: bool = False
    state: dict[str, object] = field(default_factory=dict)
    totals: TurnTotals = field(default_factory=TurnTotals)
    resumed: Literal["native", "emulated"] | None = None
    forked_from: SessionRecord | None = None
    history: list[TranscriptEntry] = field(default_factory=list)
    step_interrupt: StepInterrupt | None = None
    turn_budget_usd: float | None = None
    """The budget of the turn under way (``send``'s ``budget_usd``), for a backend that
    can stop a turn's spending from inside (the model gateway)."""
    cassette: CassetteUse | None = None
    """The cassette the session's model exchanges are recorded to or replayed from (its
    gateway's; see :mod:`seamline.gateway.cassette`)."""
    on_budget: OnBudget = "fail"
    r"""A spent budget ``fail``\ s the turn, or ``pause``\ s it (:meth:`continue_paused` goes on)."""
    paused: BudgetPause | None = None
    """Why the session's last turn paused (its budget, what it had spent), until it goes on."""
    budget_gate: Callable[[], bool] | None = None
    """A pausing turn's check for a budget it shares (a pipeline's), instead of its own spend."""

    def history_as_context(self) -> str:
        """The earlier conversation as plain text, for providers that resume by emulation."""
        lines: list[str] = []
        for entry in self.history:
            if entry.kind == "user":
                lines.append(f"User: {entry.content}")
            elif entry.kind == "assistant":
                lines.append(f"Assistant: {entry.content}")
            elif entry.kind == "tool_call":
                lines.append(f"Assistant called {entry.data.get('name')}({json.dumps(entry.data.get('arguments'))})")
            elif entry.kind == "tool_result":
                lines.append(f"Tool result: {entry.content[:2000]}")
        return "\n".join(lines)

    stages: StageChain | None = None
    turn_hooks: list[TurnHook] = field(default_factory=list)
    """Awaited with the turn's number and its ``complete`` once the turn is done, before
    the ``complete`` is recorded and emitted (a worktree run commits its changes here)."""
    closers: list[Callable[[], None]] = field(default_factory=list)
    """Called, newest first, when the session is closed: what it keeps open between turns."""

    def capture_provider_session_id(self, provider_session_id: str) -> bool:
        """Record the provider's session id once; a different later id is refused."""
        if self.provider_session_id is None:
            self.provider_session_id = provider_session_id
            if self.store is not None:
                self.store.set_provider_session_id(self.session_id, provider_session_id)
            return True
        return False

    def send(
        self,
        prompt: str,
        *,
        max_steps: int = 50,
        budget_usd: float | None = None,
        params: Mapping[str, object] | None = None,
        carried: Sequence[ToolCall] | None = None,
    ) -> AsyncIterator[Event]:
        """Run one turn and stream its events; the last one is the only ``complete``. ``carried``: the
        last turn goes on instead, from these calls without a result (see :meth:`_turn_source`)."""
        return self._run_turn(
            prompt, max_steps, budget_usd, params, spent_before=0.0, carried=carried
        )  # no generator hop

    def continue_paused(
        self, *, budget_usd: float, max_steps: int = 50, params: Mapping[str, object] | None = None
    ) -> AsyncIterator[Event]:
        """Go on with a turn that paused at its budget (``on_budget="pause"``), capped now at
        ``budget_usd`` in all, from the conversation as it stands: no finished model request
        or tool call runs again. Not paused: :class:`~seamline.errors.RunNotPaused`, raised
        here. The continuation is a turn of its own in the raw log (input ``continue``)."""
        pause = checked_raise(self.paused or stored_pause(self.store, self.session_id), self, budget_usd)
        self.paused = None
        return self._run_turn(None, max_steps, budget_usd, params, spent_before=pause.spent_usd)

    async def _run_turn(
        self,
        prompt: str | None,
        max_steps: int,
        budget_usd: float | None,
        params: _Params,
        *,
        spent_before: float,
        carried: Sequence[ToolCall] | None = None,
    ) -> AsyncIterator[Event]:
        pausing = budget_usd is not None and self.on_budget == "pause"  # the loop stops before a request
        settler = self._start_turn(prompt, None if pausing else budget_usd, pausing=pausing, again=carried is not None)
        log = settler.log
        yield settler.opening()
        pause = pause_gate(self.budget_gate, settler.totals, spent_before, budget_usd) if pausing else None
        source = self._turn_source(prompt, max_steps, params, pause, carried)
        try:
            async for event in source:
                if type(event) is TextDelta:  # the hot path of a stream: no other checks
                    if log.stored:
                        log.delta(event)
                    yield event
                    continue
                if isinstance(event, Complete):
                    settler.final = event
                    break
                if type(event) is not Usage:
                    if type(event) is Session:
                        if (out := settler.provider_session(event)) is None:
                            continue
                        event = out  # logged there
                    elif log.stored:
                        log.record(event)
                    yield event
                    continue
                if (usage := settler.count(event)) is None:
                    continue  # a usage figure already counted
                if log.stored:
                    await log.record_usage(usage)
                yield usage
                if settler.budget_usd is not None and (over := settler.over_budget()) is not None:
                    yield over
                    break
        except SeamlineError as exc:
            yield settler.fail(exc.to_event(), Complete(outcome="failed", stop_reason=exc.kind))
        except Exception as exc:  # noqa: BLE001 - a provider's bug becomes a classified error
            yield settler.fail(*_provider_bug(self.provider.name, exc))
        except BaseException:
            settler.cancelled()
            raise
        finally:
            await _close_quietly(source)
        # A turn that ended with no complete, or one paused at its budget, says so first.
        if said := settler.unfinished() or (self._paused_at(settler, budget_usd, spent_before) if pausing else None):
            yield said
        if (final := settler.plain_end()) is not None:
            yield final  # no turn hooks to run, no store to write: the end as it is
            return
        async for out in settler.finish():
            yield out

    def _paused_at(self, settler: TurnSettler, budget_usd: float | None, spent_before: float) -> Event | None:
        """A pausing turn that stopped at its budget: the session is paused (no usage figure
        cut the turn and the gateway refused nothing; what was spent before a pause counts)."""
        if settler.final is None or settler.final.stop_reason != "paused":
            return None
        self.paused, notice = pause_notice(self, budget_usd or 0.0, spent_before + settler.totals.cost_usd)
        return notice

    def _start_turn(
        self, prompt: str | None, budget_usd: float | None, *, pausing: bool = False, again: bool = False
    ) -> TurnSettler:
        if self.cassette is None or self.cassette.mode != "replay":
            self.provider._check_allowed()
        if pausing and self.provider.runs_own_tools:
            raise own_turns_refusal(self.provider.name)
        if not again or self.turn == 0:
            self.turn += 1
        self.aborted = False
        self.turn_budget_usd = budget_usd
        settler = TurnSettler(self, budget_usd)
        if self.store is not None and (self.turn > 1 or self.resumed or self.forked_from):
            self.store.set_status(self.session_id, "open")  # claim it again; a new record starts open
        if again:
            return settler  # the turn taken up again was recorded when it started
        if prompt is None:
            settler.log.record_input("continue", f"budget_usd={budget_usd}")
            return settler
        settler.log.record_input("prompt", prompt)
        if self.paused is not None:  # a new prompt leaves the paused turn behind
            self.paused = None
            forget_pause(self)
        return settler

    def _turn_source(
        self,
        prompt: str | None,
        max_steps: int,
        params: Mapping[str, object] | None,
        pause: Callable[[], bool] | None = None,
        carried: Sequence[ToolCall] | None = None,
    ) -> AsyncIterator[Event]:
        """The provider's own turn (an agent CLI), or the loop over the provider's steps;
        ``prompt`` None goes on from the conversation as it stands (a paused turn).

        ``carried`` (model APIs): the session's last turn goes on, ``prompt`` unused: these
        calls of its last step, which have no result (a server restarted while one waited
        for approval), are approved and run, then the loop calls the model again."""
        provider = self.provider
        if provider.runs_own_tools:
            assert prompt is not None  # a continue is refused for these at _start_turn
            wire_prompt = prompt
            if self.resumed == "emulated" and not self.state.get("history_sent") and self.history:
                # No native resume: the earlier conversation travels as context.
                wire_prompt = f"Earlier conversation:\n{self.history_as_context()}\n\nContinue from there. {prompt}"
                self.state["history_sent"] = True
            return provider._turn(self, wire_prompt)
        if carried is None:
            if prompt is not None:
                self.messages.append(Message(role="user", content=prompt))
        elif carried:  # the assistant message that asked for them, as the transcript left it
            last = self.messages[-1] if self.messages and self.messages[-1].role == "assistant" else None
            if last is None:
                last = Message(role="assistant")
                self.messages.append(last)
            last.tool_calls.extend(carried)
        return run_agent_loop(
            step=provider._step,
            messages=self.messages,
            tools=self.tools,
            session_id=self.session_id,
            turn=self.turn,
            model=provider.model,
            observers=self.observers,
            approval=self.approval,
            config=LoopConfig(max_steps=max_steps, params=dict(params or {})),
            aborted=lambda: self.aborted,
            stages=self.stages,
            interrupt=self._new_interrupt(),
            carried=carried or (),
            pause=pause,
        )

    def _new_interrupt(self) -> StepInterrupt:
        self.step_interrupt = StepInterrupt()
        return self.step_interrupt


def new_session_id() -> str:
    """A new session's id: a random version-4 UUID as 32 hex digits, what ``uuid.uuid4().hex``
    gives, made without the ``UUID`` object (a fifth of its cost, once per session)."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # the RFC 4122 variant
    return raw.hex()


async def _close_quietly(source: AsyncIterator[Event]) -> None:
    closer = getattr(source, "aclose", None)
    if closer is not None:
        try:
            await closer()
        except Exception:  # noqa: BLE001 - closing a broken source must not mask the turn
            pass


def _copy_history(store: SessionStore, session_id: str, entries: Sequence[TranscriptEntry]) -> None:
    """Give a new session (a fork) these messages as its history, in its raw log."""
    for entry in entries:
        payload = {
            "kind": entry.kind,
            "role": entry.role,
            "content": entry.content,
            "call_id": entry.call_id,
            "data": entry.data,
        }
        store.append_raw(session_id, 0, "in", "history", msgspec.json.encode(payload).decode())
    store.flush()


def messages_from_transcript(entries: Sequence[TranscriptEntry]) -> list[Message]:
    """Rebuild the loop's conversation from a transcript (emulated resume and fork).

    A tool call whose result is not in the transcript (a fork cut between them, a crash)
    is dropped: no model API accepts a call without its answer.
    """
    answered = {e.call_id for e in entries if e.kind == "tool_result"}
    entries = [e for e in entries if e.kind != "tool_call" or e.call_id in answered]
    messages: list[Message] = []
    current: Message | None = None
    for entry in entries:
        if entry.kind == "user":
            current = None
            messages.append(Message(role="user", content=entry.content))
        elif entry.kind in ("assistant", "tool_call"):
            if current is None:
                current = Message(role="assistant")
                messages.append(current)
            if entry.kind == "assistant":
                current.content += entry.content
            else:
                current.tool_calls.append(
                    ToolCall(
                        call_id=entry.call_id or "",
                        name=str(entry.data.get("name")),
                        arguments=dict(entry.data.get("arguments") or {}),
                    )
                )
        elif entry.kind == "tool_result":
            current = None
            messages.append(
                Message(
                    role="tool",
                    content=entry.content,
                    call_id=entry.call_id,
                    name=entry.data.get("name"),
                    is_error=bool(entry.data.get("is_error")),
                )
            )
    return messages
