"""Runs held by one server process: the live sessions, each run's event log, permission
prompts answered from outside, cancellation, and busy sessions.

Nothing here knows HTTP: :mod:`seamline.server.app` maps routes onto :class:`RunHub`.
A run is one turn on one session. Its events are kept in order in memory, numbered from
1, for as long as the process lives, so a reader that drops can come back and read on
after the last number it saw. A reader that goes away never stops the run; only
:meth:`RunHub.cancel` does.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from seamline.errors import BudgetExceeded, InvalidRequest, RunNotPaused
from seamline.events import Complete, Event, PermissionRequest, Raw, ToolCall, ToolResult, Usage
from seamline.providers.base import Provider, ProviderSession
from seamline.providers.failover import Failover, fallback_backends
from seamline.providers.pause import OnBudget
from seamline.providers.registry import create_provider
from seamline.runner import RunOptions, check_on_budget
from seamline.server.agents_file import AGENT_KEY, ServePolicy
from seamline.server.pending import Approvals
from seamline.server.users import ACTING, OWNER_KEY, User
from seamline.sessions.pending import PendingPermissions
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.records import SessionRecord, metadata_problem
from seamline.sessions.rules import PermissionRules
from seamline.sessions.sqlite_store import SQLiteStore
from seamline.tools.base import Toolset
from seamline.tools.permissions import PermissionAnswer, PermissionService
from seamline.tools.workspace import Workspace, workspace_tools

if TYPE_CHECKING:
    from seamline.definitions import PipelineDefinition
    from seamline.pipeline.controller import PipelineController
    from seamline.sandbox.journal import EditJournal

__all__ = ["Busy", "LiveSession", "NotFound", "NotPaused", "Run", "RunHub", "RunStatus"]

RunStatus = Literal["queued", "running", "completed", "failed", "aborted", "budget", "paused"]
BusyPolicy = Literal["reject", "enqueue"]
_FINAL: Final = frozenset({"completed", "failed", "aborted", "budget"})


class NotFound(InvalidRequest):
    """No such session, run or pending permission request."""


class Busy(InvalidRequest):
    """The session is running a turn and the request asked not to wait."""


class NotPaused(RunNotPaused):
    """A budget raise for a run of this server that is not paused at its budget (409)."""


@dataclass(eq=False)
class Run:
    """One turn on one session and every event it produced, numbered from 1."""

    id: str
    session_id: str | None
    prompt: str
    pipeline: str | None = None
    first_phase: str | None = None
    yes: bool = False
    started_by: str | None = None  # the user that started it (None: no users on this server)
    status: RunStatus = "queued"
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    events: list[Event] = field(default_factory=list)
    stop_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    current_tool: str | None = None  # a tool called and not answered yet
    cancel_requested: bool = False
    pending: dict[str, tuple[PermissionRequest, asyncio.Future[PermissionAnswer]]] = field(default_factory=dict)
    announced: set[str] = field(default_factory=set)
    prompted: set[str] = field(default_factory=set)  # the requests that waited for a client's answer
    task: asyncio.Task[None] | None = None
    max_steps: int = 50
    budget_usd: float | None = None
    # A run taken up by a new server (seamline.server.pending): the calls its turn goes on
    # with (a model API), or the prompt that resumes it (an agent), and the stored requests
    # that an agent asks again under a new id.
    carried: list[ToolCall] | None = None
    turn_prompt: str | None = None
    again: set[str] = field(default_factory=set)
    paused: dict[str, Any] | None = None  # why it paused at its budget: which, the cap, what was spent
    raise_to: float | None = None  # a raised budget: the turn goes on (``continue_paused``)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def done(self) -> bool:
        return self.status in _FINAL

    def append(self, event: Event) -> None:
        if isinstance(event, PermissionRequest):
            if event.request_id in self.announced:
                return  # announced live while it waited; the turn reports it again afterwards
            self.announced.add(event.request_id)
        elif isinstance(event, Usage):
            self.input_tokens += event.input_tokens
            self.output_tokens += event.output_tokens
            self.cost_usd = None if self.cost_usd is None or event.cost_usd is None else self.cost_usd + event.cost_usd
        elif isinstance(event, ToolCall):
            self.current_tool = event.name
        elif isinstance(event, ToolResult):
            self.current_tool = None
        self.events.append(event)
        self._notify()

    def asked(self, request: PermissionRequest) -> bool:
        """Whether ``request`` waited for a client's answer (an interrupt), rather than being
        decided at once by ``yes`` or a rule."""
        return request.request_id in self.prompted

    def mark(self, status: RunStatus, paused: dict[str, Any] | None = None) -> None:
        """A status on the way (queued, running, paused with why), told to followers."""
        self.status, self.paused = status, paused
        self._notify()

    def finish(self, status: RunStatus, stop_reason: str) -> None:
        self.status = status
        self.stop_reason = stop_reason
        self.finished_at = time.time()
        self._notify()

    def _notify(self) -> None:
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    async def follow(
        self, after: int = 0, *, heartbeat: float | None = None, most: int = 256
    ) -> AsyncIterator[tuple[int, list[Event]]]:
        """The events numbered above ``after`` as they come, in batches of what is there
        (at most ``most``), until the run is over: ``(n, events)`` where ``events[0]`` is
        number ``n + 1``. A transport writes a batch at once: one write, not one per event.

        With ``heartbeat``, ``(n, [])`` comes whenever that many seconds pass without an
        event, so a transport can keep an idle connection alive.
        """
        index = max(0, after)
        while True:
            if index < len(self.events):
                batch = self.events[index : index + most]
                yield index, batch
                index += len(batch)
                continue
            if self.done:
                return
            wake = self._wake
            if heartbeat is None:
                await wake.wait()
                continue
            try:
                async with asyncio.timeout(heartbeat):  # a timer handle, not a task per wait
                    await wake.wait()
            except TimeoutError:
                yield index, []

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "pipeline": self.pipeline,
            "started_by": self.started_by,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "prompt": self.prompt,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "events": len(self.events),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "pending_permissions": [
                {
                    "request_id": r.request_id,
                    "call_id": r.call_id,
                    "tool": r.tool,
                    "arguments": r.arguments,
                    "reason": r.reason,
                }
                for r, _ in self.pending.values()
            ],
            "current_tool": self.current_tool,
            "paused": self.paused,
        }


@dataclass(eq=False)
class LiveSession:
    """A session this process holds open: its provider, its handle and its turn lock."""

    provider: Provider
    session: ProviderSession
    approval: PermissionService | None = None
    yes: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    current: Run | None = None
    waiting: int = 0
    runs: list[str] = field(default_factory=list)
    failover: Failover | None = None  # an agent with fallbacks: its turns go through it

    @property
    def busy(self) -> bool:
        return self.lock.locked() or self.waiting > 0

    @property
    def serving(self) -> ProviderSession:
        """The session that runs the turns now (a fallback's, once one took over)."""
        return self.failover.session if self.failover is not None else self.session

    async def close(self) -> None:
        try:
            await self.provider.close(self.session)
        finally:
            if self.failover is not None:
                await self.failover.aclose()  # the fallbacks' sessions


class RunHub:
    """The sessions and runs of one server process over one store."""

    def __init__(
        self,
        store: SessionStore,
        *,
        workspace: str | os.PathLike[str] = ".",
        cancel_grace: float = 2.0,
        keep_finished: int = 1000,
        provider_factory: Callable[[str, str | None, Mapping[str, str]], Provider] | None = None,
        policy: ServePolicy | None = None,
        notify: Callable[[str, Run | None, Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.store = store
        # Told of a permission request, a run's end and a budget reached (the notifier).
        self.notify = notify
        self.workspace = Path(workspace).resolve()
        self.policy = policy or ServePolicy(self.workspace)
        self.cancel_grace = cancel_grace
        self.keep_finished = keep_finished
        self._finished: deque[str] = deque()
        self._toolsets: dict[Path, Toolset] = {}
        self._controllers: dict[str, PipelineController] = {}
        self.sessions: dict[str, LiveSession] = {}
        self.runs: dict[str, Run] = {}
        self._factory = provider_factory or (
            lambda name, model, options: create_provider(name, model=model, options=options)
        )
        self._rules: PermissionRules | None = None
        self._journal: EditJournal | None = None
        self._opened = False
        self.approvals = Approvals(PendingPermissions(store))  # the requests that wait, in the store

    def _open_files(self) -> None:
        """The permission rules and the edit journal beside a store file, opened on first
        use (in the thread that serves: their SQLite connections stay in it)."""
        if self._opened:
            return
        self._opened = True
        store_file = getattr(self.store, "path", None)
        if isinstance(self.store, SQLiteStore) and store_file and store_file != ":memory:":
            from seamline.sandbox.journal import EditJournal, journal_path_for

            self._rules = PermissionRules(store_file)
            self._journal = EditJournal(journal_path_for(store_file))

    # -- sessions --------------------------------------------------------------------------
    def _backend(self, given: RunOptions) -> Provider:
        if not isinstance(given.provider, str):  # pragma: no cover - a plan names its provider
            raise InvalidRequest("the server builds its providers by name")
        return self._factory(given.provider, given.model, dict(given.options or {}))

    def _approval(self, live: Callable[[], LiveSession | None], workspace: Path, yes: bool) -> PermissionService:
        self._open_files()

        async def prompter(request: PermissionRequest) -> PermissionAnswer:
            slot = live()
            run = slot.current if slot is not None else None
            if run is None:
                return PermissionAnswer("deny", "once")
            if run.cancel_requested:
                return PermissionAnswer("deny", "once")
            assert slot is not None
            held = self.approvals.waiting(run, request, slot.session.turn)  # asked before a restart
            future: asyncio.Future[PermissionAnswer]
            if held is None:
                future = asyncio.get_running_loop().create_future()
                announced, new = request, True
            else:
                announced, future, new = held
            if new:
                self.approvals.stored(run, announced)  # kept in the store while it waits
                run.pending[announced.request_id] = (announced, future)
                run.prompted.add(announced.request_id)
                run.append(announced)  # announced now, so a client can answer while the turn waits
                self._tell(
                    "permission.requested",
                    run,
                    {"request_id": announced.request_id, "tool": announced.tool, "reason": announced.reason},
                )
            try:
                return await future
            finally:
                run.pending.pop(announced.request_id, None)
                self.approvals.removed(run, announced.request_id)

        return PermissionService(rules=self._rules, workspace=workspace, yes=yes, prompter=prompter)

    def _tools(self, workspace: Workspace) -> Toolset:
        """The workspace tools, journaled so a session can be reverted; built once per
        workspace and shared by its sessions (the tools hold no state of a session)."""
        self._open_files()
        tools = self._toolsets.get(workspace.root)
        if tools is None:
            tools = self._toolsets[workspace.root] = workspace_tools(workspace, journal=self._journal)
        return tools

    async def _hold(
        self,
        backend: Provider,
        given: RunOptions,
        start: Callable[[Toolset, PermissionService], Awaitable[ProviderSession]],
    ) -> LiveSession:
        """Start a session with the workspace tools and a permission service whose prompts
        go to the session's current run, and hold it live."""
        holder: list[LiveSession] = []
        ws = Workspace(given.workspace)
        approval = self._approval(lambda: holder[0] if holder else None, ws.root, given.yes)
        backups = fallback_backends(given.fallback)  # checked before the session opens
        session = await start(self._tools(ws), approval)
        slot = LiveSession(provider=backend, session=session, approval=approval, yes=given.yes)
        if backups:
            slot.failover = Failover(session, backups)
        holder.append(slot)
        self.sessions[session.session_id] = slot
        return slot

    async def open_session(
        self,
        *,
        provider: str | None = None,
        model: str | None = None,
        options: Mapping[str, str] | None = None,
        workspace: str | None = None,
        yes: bool = False,
        metadata: Mapping[str, Any] | None = None,
        agent: str | None = None,
    ) -> LiveSession:
        """Open a session as the server's policy allows: a declared ``agent`` with the
        operator's settings, or a provider of the safe defaults."""
        problem = metadata_problem(dict(metadata or {}))
        if problem is not None:
            raise InvalidRequest(problem)  # before anything is stored: a listing must stay readable
        if metadata and AGENT_KEY in metadata:
            raise InvalidRequest(f"metadata key {AGENT_KEY!r} is the server's; start a declared agent with 'agent'")
        if metadata and OWNER_KEY in metadata:
            raise InvalidRequest(f"metadata key {OWNER_KEY!r} is the server's: the user that opened the session")
        plan = self.policy.plan(
            provider=provider, model=model, options=dict(options or {}), workspace=workspace, yes=yes, agent=agent
        )
        given = plan.run_options()
        backend = self._backend(given)
        marked = {**dict(metadata or {}), "surface": "serve"}
        user = ACTING.get()
        if user is not None:
            marked[OWNER_KEY] = user.name
        if plan.agent is not None:
            marked[AGENT_KEY] = plan.agent
        return await self._hold(
            backend,
            given,
            lambda tools, approval: backend.open(
                workspace=Path(given.workspace), store=self.store, tools=tools, approval=approval, metadata=marked
            ),
        )

    async def _revive(self, record: SessionRecord, *, options: Mapping[str, str] | None, yes: bool) -> LiveSession:
        """A stored session this process does not hold: resume it from the store."""
        given = self.policy.stored(record, dict(options or {}), yes).run_options()
        backend = self._backend(given)
        return await self._hold(
            backend,
            given,
            lambda tools, approval: backend.resume(
                record.id, store=self.store, tools=tools, approval=approval, handoff=record.provider != backend.name
            ),  # a session a fallback took over goes back to its agent's backend (a handoff)
        )

    async def fork_session(
        self, session_id: str, *, at: int | None = None, options: Mapping[str, str] | None = None, yes: bool = False
    ) -> LiveSession:
        record = self.require_session(session_id)
        plan = self.policy.stored(record, dict(options or {}), yes)
        given = plan.run_options()
        live = self.sessions.get(record.id)
        # A live parent lends its provider (a scripted one goes on with its script).
        backend = live.provider if live is not None and not options else None
        if backend is None:
            backend = self._backend(given)
        chosen = backend
        slot = await self._hold(
            backend,
            given,
            lambda tools, approval: chosen.fork(
                record.id,
                store=self.store,
                at=at,
                tools=tools,
                approval=approval,
                handoff=record.provider != chosen.name,
            ),
        )
        marks: dict[str, object] = {"surface": "serve"}
        if plan.agent is not None:  # the fork keeps its agent, so its runs keep the operator's settings
            marks[AGENT_KEY] = plan.agent
        user = ACTING.get()
        if user is not None:  # the fork is its opener's, whoever opened the parent
            marks[OWNER_KEY] = user.name
        if len(marks) > 1:
            self.store.update_metadata(slot.session.session_id, marks)
        return slot

    def require_session(self, session_id: str) -> SessionRecord:
        try:
            return self.store.require(session_id)
        except InvalidRequest as exc:
            raise NotFound(exc.message) from None

    async def delete_session(self, session_id: str) -> str:
        record = self.require_session(session_id)
        live = self.sessions.get(record.id)
        if live is not None and live.busy:
            raise Busy(f"session {record.id} is running a turn; cancel it first")
        if live is not None:
            await live.close()
            self.sessions.pop(record.id, None)
        self.store.delete_session(record.id)
        from seamline.providers.programs.envelope_launch import remove_envelope_homes

        remove_envelope_homes(record.id)  # what an enveloped agent CLI kept of it
        return str(record.id)

    def revert(self, session_id: str, *, to_step: int = 0, force: bool = False) -> dict[str, Any]:
        record = self.require_session(session_id)
        self.policy.stored(record, {}, False)  # its folder is one this server offers
        live = self.sessions.get(record.id)
        if live is not None and live.busy:
            raise Busy(f"session {record.id} is running a turn; cancel it first")
        self._open_files()
        if self._journal is None:
            raise InvalidRequest("this server keeps no edit journal (its store is not a file)")
        report = self._journal.revert(record.id, to_step=to_step, force=force)
        return {
            "session_id": record.id,
            "workspace": str(report.workspace),
            "to_step": report.to_step,
            "steps_undone": report.steps_undone,
            "restored": list(report.restored),
        }

    # -- runs --------------------------------------------------------------------------------
    async def start_run(
        self,
        session_id: str,
        prompt: str,
        *,
        busy: BusyPolicy = "reject",
        max_steps: int = 50,
        budget_usd: float | None = None,
        options: Mapping[str, str] | None = None,
        yes: bool = False,
        on_budget: OnBudget | None = None,
    ) -> Run:
        """Start a turn on the session, or queue it behind the running one (``enqueue``).
        ``on_budget`` (else the session's agent's, else ``fail``): ``pause`` pauses the run
        at its budget until :meth:`raise_budget`."""
        if not prompt.strip():
            raise InvalidRequest("the prompt is empty")
        if max_steps < 1:
            raise InvalidRequest("max_steps must be at least 1")
        record = self.require_session(session_id)
        self.policy.stored(record, dict(options or {}), yes)  # what this run asks is allowed
        budget_usd = self.policy.run_budget(record, budget_usd)
        user = ACTING.get()
        budget_usd = self._allowance(user, budget_usd)
        slot = self.sessions.get(record.id) or await self._revive(record, options=options, yes=yes)
        pausing = self.policy.run_on_budget(record, on_budget)
        check_on_budget(slot.serving.provider, pausing)
        if slot.busy and busy == "reject":
            running = slot.current.id if slot.current is not None else "a queued run"
            raise Busy(f"session {slot.session.session_id} is busy with run {running}; retry, or ask to enqueue")
        run = Run(id=uuid.uuid4().hex, session_id=slot.session.session_id, prompt=prompt, yes=yes, max_steps=max_steps)
        run.started_by = user.name if user is not None else None
        run.max_steps, run.budget_usd = max_steps, budget_usd
        self._abandon_paused(slot)  # a new prompt: the paused turn cannot go on any more
        self.runs[run.id] = run
        slot.runs.append(run.id)
        slot.waiting += 1
        turn = RunOptions(yes=yes, max_steps=max_steps, budget_usd=budget_usd, on_budget=pausing)
        run.task = asyncio.create_task(self._drive(slot, run, turn))
        return run

    async def _drive(self, slot: LiveSession, run: Run, turn: RunOptions) -> None:
        started = False
        try:
            async with slot.lock:
                slot.waiting -= 1
                started = True
                if run.cancel_requested:
                    run.append(Complete(outcome="aborted", stop_reason="cancelled"))
                    run.finish("aborted", "cancelled")
                    return
                slot.current = run
                if slot.approval is not None:
                    slot.approval.yes = slot.yes or run.yes  # this run's "yes", else the session's
                run.status = "running"
                run._notify()
                try:
                    await self._turn(slot, run, turn)
                finally:
                    slot.current = None
        except asyncio.CancelledError:
            if not started:
                slot.waiting -= 1
            if not run.done:
                run.append(Complete(outcome="aborted", stop_reason="cancelled"))
                run.finish("aborted", "cancelled")
            if not run.cancel_requested:
                raise
        finally:
            if run.status == "paused":  # not over: a raise goes on with it (raise_budget)
                self._tell("budget.reached", run, run.paused or {})
            else:
                if not run.done:  # pragma: no cover - every path above finishes the run
                    run.finish("failed", "server")
                self._retire(run)

    # -- budgets that pause -----------------------------------------------------------------
    def raise_budget(self, run_id: str, budget_usd: float) -> Run:
        """Raise the budget of a run paused at it to ``budget_usd`` (in all) and go on with
        it from its session's conversation: no finished model request runs again. A run
        that is not paused: :class:`NotPaused` (409), nothing changed."""
        run = self.require_run(run_id)
        controller = self._controllers.get(run.id)
        if controller is not None and run.status == "paused":
            controller.guard.raise_cap(budget_usd)  # 400 when not above what it spent
            run.mark("running")
            return run
        slot = self.sessions.get(run.session_id) if run.session_id else None
        pause = slot.serving.paused if slot is not None and run.status == "paused" else None
        if slot is None or pause is None:
            raise NotPaused(f"run {run_id} is not paused at its budget (status: {run.status}); nothing to raise")
        if not math.isfinite(budget_usd) or budget_usd <= pause.spent_usd:
            raise InvalidRequest(f"budget_usd must be more than the {pause.spent_usd:.6f} USD the run has spent")
        run.raise_to = budget_usd
        run.mark("queued")
        slot.waiting += 1
        turn = RunOptions(yes=run.yes, max_steps=run.max_steps, budget_usd=budget_usd, on_budget="pause")
        run.task = asyncio.create_task(self._drive(slot, run, turn))
        return run

    def _abandon_paused(self, slot: LiveSession) -> None:
        """The session's paused runs end ``budget``: a new prompt leaves their turn behind."""
        for run_id in slot.runs:
            run = self.runs.get(run_id)
            if run is not None and run.status == "paused":
                run.finish("budget", "paused")
                self._retire(run)

    # -- users' budgets and notifications -------------------------------------------------
    def spent_today(self, name: str) -> float:
        """What the runs ``name`` started since 00:00 UTC cost, as far as this process
        knows them (the runs it holds; a restart forgets them)."""
        midnight = time.time() // 86400 * 86400
        return sum(r.cost_usd or 0.0 for r in self.runs.values() if r.started_by == name and r.created_at >= midnight)

    def _allowance(self, user: User | None, budget_usd: float | None) -> float | None:
        """A run's budget under its user's daily cap: what is left of the cap when that is
        less than the run's own budget; BudgetExceeded when nothing is left."""
        if user is None or user.budget_usd_per_day is None:
            return budget_usd
        left = user.budget_usd_per_day - self.spent_today(user.name)
        if left <= 0:
            cap = user.budget_usd_per_day
            self._tell("budget.reached", None, {"user": user.name, "budget_usd_per_day": cap})
            raise BudgetExceeded(
                f"{user.name} has spent its daily budget (${cap:.2f} a day, UTC); "
                "an admin can raise it (seamline users add with --budget-usd-per-day)"
            )
        return left if budget_usd is None else min(budget_usd, left)

    def _tell(self, what: str, run: Run | None, details: Mapping[str, Any]) -> None:
        if self.notify is not None:
            self.notify(what, run, details)

    def turn_options(self, run: Run) -> RunOptions:
        return RunOptions(yes=run.yes, max_steps=run.max_steps, budget_usd=run.budget_usd)

    def _retire(self, run: Run) -> None:
        """Keep the newest ``keep_finished`` finished runs in memory; older ones are
        forgotten (their events stay in the store's raw log)."""
        if run.prompted:  # it waited for a person: nothing of it waits in the store any more
            self.approvals.ended(run)
            run.pending.clear()  # a request taken up that rules or yes decided after all
        ended = {"failed": "run.failed", "budget": "budget.reached"}.get(run.status, "run.finished")
        self._tell(ended, run, {})
        self._finished.append(run.id)
        while len(self._finished) > self.keep_finished:
            old = self._finished.popleft()
            gone = self.runs.pop(old, None)
            if gone is not None and gone.session_id is not None:
                owner = self.sessions.get(gone.session_id)
                if owner is not None and old in owner.runs:
                    owner.runs.remove(old)

    async def _turn(self, slot: LiveSession, run: Run, turn: RunOptions) -> None:
        final: Complete | None = None
        try:
            turns = slot.failover or slot.session
            slot.serving.on_budget = turn.on_budget
            if run.carried is not None:  # taken up after a restart: its turn goes on
                events = slot.session.send(
                    run.prompt, max_steps=turn.max_steps, budget_usd=turn.budget_usd, carried=run.carried
                )
            elif run.raise_to is not None:  # a paused run raised: its turn goes on
                events = slot.serving.continue_paused(budget_usd=run.raise_to, max_steps=turn.max_steps)
            else:
                prompt = run.turn_prompt or run.prompt
                events = turns.send(prompt, max_steps=turn.max_steps, budget_usd=turn.budget_usd)
            async for event in events:
                run.append(event)
                if isinstance(event, Complete):
                    final = event
        except asyncio.CancelledError:
            # Only cancel() cancels this task; the seam has marked the session aborted.
            final = Complete(outcome="aborted", stop_reason="cancelled")
            run.append(final)
        if final is None:  # pragma: no cover - the seam guarantees a complete
            final = Complete(outcome="failed", stop_reason="no_result")
            run.append(final)
        if (pause := slot.serving.paused) is not None and final.stop_reason == "paused":
            run.stop_reason = "paused"  # not over: raise_budget goes on with it
            run.mark("paused", {"budget": "run", "budget_usd": pause.cap_usd, "spent_usd": pause.spent_usd})
            return
        run.finish(final.outcome, final.stop_reason)

    def _pipeline_request(
        self, name: str, prompt: str, max_steps: int, **plan: Any
    ) -> tuple[PipelineDefinition, RunOptions, User | None, float | None]:
        """What every hub checks of a pipeline run's request, and what the policy makes of
        it (``plan``: :meth:`ServePolicy.plan`'s arguments): the pipeline, the run's
        options, who asks, and the budget they may spend."""
        from seamline.pipeline.builtin import BUILTIN_PIPELINES

        definition = BUILTIN_PIPELINES.get(name)
        if definition is None:
            raise NotFound(f"no pipeline {name!r}; built in: {', '.join(BUILTIN_PIPELINES)}")
        if not prompt.strip():
            raise InvalidRequest("the prompt is empty")
        if max_steps < 1:
            raise InvalidRequest("max_steps must be at least 1")
        given = self.policy.plan(**plan).run_options(max_steps=max_steps)
        user = ACTING.get()
        return definition, given, user, self._allowance(user, given.budget_usd)

    async def start_pipeline(
        self,
        name: str,
        prompt: str,
        *,
        provider: str | None = None,
        model: str | None = None,
        options: Mapping[str, str] | None = None,
        workspace: str | None = None,
        yes: bool = False,
        max_steps: int = 50,
        budget_usd: float | None = None,
        agent: str | None = None,
        on_budget: OnBudget | None = None,
    ) -> Run:
        """Run a built-in pipeline under its controller; its trace is ``traces/RUN.jsonl``
        beside the store, so the run id is also the trace's. ``on_budget="pause"``: the
        shared budget pauses every role, until :meth:`raise_budget`."""
        from seamline.live import open_run

        definition, given, user, pipeline_budget = self._pipeline_request(
            name, prompt, max_steps, provider=provider, model=model, options=dict(options or {}),
            workspace=workspace, yes=yes, agent=agent, budget_usd=budget_usd,
        )  # fmt: skip
        backend = self._backend(given)
        ws = Workspace(given.workspace)
        run = Run(
            id=uuid.uuid4().hex, session_id=None, prompt=prompt, pipeline=name, first_phase=definition.phases[0].name
        )
        run.started_by = user.name if user is not None else None
        store_file = getattr(self.store, "path", None)
        controller = open_run(
            definition,
            provider=backend,
            workspace=ws.root,
            store=self.store,
            store_path=store_file if store_file and store_file != ":memory:" else None,
            in_memory=not store_file or store_file == ":memory:",
            tools=self._tools(ws),
            yes=given.yes,
            max_steps=given.max_steps,
            budget_usd=pipeline_budget,
            run_id=run.id,
            on_budget=on_budget or given.on_budget,
        )
        self.runs[run.id] = run
        run.task = asyncio.create_task(self._drive_pipeline(run, controller))
        self._controllers[run.id] = controller
        return run

    async def _drive_pipeline(self, run: Run, controller: PipelineController) -> None:
        from seamline.live.agents import paused_of
        from seamline.pipeline.builtin import stream_pipeline

        run.status = "running"
        final: Complete | None = None
        try:
            async for event in stream_pipeline(controller, run.prompt):
                run.append(event)
                if isinstance(event, Complete):
                    final = event  # the run's own complete is the last one
                elif isinstance(event, Raw) and event.source == "budget":
                    run.mark("paused", paused_of(event))  # every role waits for a raise
                    self._tell("budget.reached", run, run.paused or {})
        except asyncio.CancelledError:
            final = Complete(outcome="aborted", stop_reason="cancelled")
            run.append(final)
        finally:
            self._controllers.pop(run.id, None)
            if final is None:  # pragma: no cover - the controller always ends with complete
                final = Complete(outcome="failed", stop_reason="no_result")
                run.append(final)
            run.finish(final.outcome, final.stop_reason)
            self._retire(run)

    def summaries(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The runs this server holds (of one session, when given)."""
        return [r.summary() for r in self.runs.values() if session_id is None or r.session_id == session_id]

    def require_run(self, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None:
            raise NotFound(f"no run {run_id!r} in this server")
        return run

    async def cancel(self, run_id: str) -> Run:
        """End the run ``aborted``: a queued run never starts, a running one is asked to stop,
        pending permission requests are denied, and after the grace period it is cut."""
        run = self.require_run(run_id)
        if run.done:
            return run
        if run.status == "paused" and run.id not in self._controllers:  # nothing runs: it ends here
            run.paused = None
            run.finish("aborted", "cancelled")
            self._retire(run)
            return run
        if run.status == "paused":  # a pipeline's roles wait for a raise: the cut ends them
            run.mark("running")
        run.cancel_requested = True
        for _, future in list(run.pending.values()):
            if not future.done():
                future.set_result(PermissionAnswer("deny", "once"))
        controller = self._controllers.get(run.id)
        if controller is not None:
            await controller.cancel()
            asyncio.get_running_loop().call_later(self.cancel_grace, self._cut, run)
            return run
        slot = self.sessions.get(run.session_id) if run.session_id else None
        if run.status == "queued" and run.task is not None:
            run.task.cancel()  # it never reaches the provider
        elif run.status == "running" and slot is not None and slot.current is run:
            await slot.serving.provider.abort(slot.serving)
            asyncio.get_running_loop().call_later(self.cancel_grace, self._cut, run)
        return run

    def _cut(self, run: Run) -> None:
        if not run.done and run.task is not None and run.status == "running":
            run.task.cancel()

    def answer(self, run_id: str, request_id: str, answer: PermissionAnswer) -> PermissionRequest:
        run = self.require_run(run_id)
        pending = run.pending.get(self.approvals.current(run, request_id))
        if pending is None:
            raise NotFound(f"run {run_id} has no pending permission request {request_id!r}")
        request, future = pending
        user = ACTING.get()
        if not future.done():
            future.set_result(PermissionAnswer(answer.decision, answer.scope, by=user.name if user else answer.by))
            self.approvals.removed(run, request.request_id)  # decided: it waits no more, in the store too
        return request

    def stop_runs(self) -> None:
        """Cancel every run that has not ended (they end ``aborted``), so their streams
        close and a shutdown need not wait for them."""
        for run in list(self.runs.values()):
            if not run.done and run.task is not None:
                run.cancel_requested = True
                run.task.cancel()

    async def close(self) -> None:
        """Cancel what still runs and close every session."""
        for run in list(self.runs.values()):
            if not run.done and run.task is not None:
                run.task.cancel()
        tasks = [r.task for r in self.runs.values() if r.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for slot in list(self.sessions.values()):
            try:
                await slot.close()
            except Exception:  # noqa: BLE001 - closing one session must not keep the others open
                pass
        self.sessions.clear()
        if self._rules is not None:
            self._rules.close()
        if self._journal is not None:
            self._journal.close()
