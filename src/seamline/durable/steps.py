"""The two pieces of work a durable run is made of, free of any engine.

:func:`advance` runs the pipeline controller over the role turns finished so far (a
re-drive: a finished turn's events come from the store, no provider is called). Where
the controller asks for a turn that has not run, the turn is recorded as needed and the
step returns the keys of all such turns; the engine runs them (:func:`run_turn`, each
anywhere) and advances again. Once no turn is missing the controller reaches a terminal
phase, and this last pass writes the trace, hash-chained by one writer, and the run's
report. The controller is deterministic given the turns' recorded responses (what
``trace redrive`` relies on), so every pass takes the same decisions.

:func:`run_turn` runs one role turn through the seam, publishes its events to the
store as they come, and records the finished turn (events without deltas, usage) under
its key. A turn already finished is returned as recorded, never run again.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from seamline.definitions import PipelineDefinition, definition_from_data
from seamline.durable.ledger import RunLedger, turn_key
from seamline.errors import InvalidRequest, SeamlineError
from seamline.events import Complete, Error, ErrorKind, Event, Raw, ReasoningDelta, TextDelta, Usage
from seamline.live import provider_identity
from seamline.pipeline.agents import AgentKey
from seamline.pipeline.controller import PipelineController, exit_code_for
from seamline.providers.base import Provider, ProviderSession
from seamline.providers.registry import create_provider
from seamline.runner import RunOptions, make_provider, public_options
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.rules import permission_service
from seamline.sessions.sqlite_store import open_store
from seamline.sessions.trace_heads import anchor_head
from seamline.tools.base import Toolset
from seamline.tools.workspace import Workspace, workspace_tools
from seamline.trace.writer import TraceWriter, trace_path

__all__ = ["MalformedRun", "RunSpec", "TurnNeeded", "UnknownRun", "advance", "run_turn", "turn_session_id"]

_event_type: Any = Event


class RunSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What a durable run is: kept in the store by the client, read by every worker.

    ``store`` and ``workspace`` are absolute, so a worker anywhere on the host (or on
    another host with the same paths) reaches them. ``options`` never holds secrets
    (:func:`seamline.runner.public_options`); keys travel in the workers' environment."""

    run_id: str
    definition: dict[str, Any]
    task: str
    store: str
    workspace: str
    provider: str = "offline"
    model: str | None = None
    options: dict[str, str] = msgspec.field(default_factory=dict)
    max_steps: int = 50
    budget_usd: float | None = None
    yes: bool = False
    allow: list[str] | None = None
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    trace_file: str | None = None

    @classmethod
    def of(cls, given: RunOptions, *, run_id: str, definition: PipelineDefinition, task: str, store: str) -> RunSpec:
        """The spec of a run with these options, as ``seamline run`` builds them for a local
        run: what a worker needs travels (the provider by name with its options as
        :func:`~seamline.runner.public_options` keeps them, the workspace made absolute);
        objects that cannot leave this process (a provider object, tools, a callback) are
        refused."""
        if not isinstance(given.provider, str):
            raise InvalidRequest("a durable run names its provider (a worker builds it): give provider='NAME'")
        local = [name for name in ("tools", "approval", "builder", "on_open") if getattr(given, name) is not None]
        if local:
            raise InvalidRequest(f"{', '.join(local)} cannot travel to a worker: a durable run gives names only")
        provider = make_provider(given.provider, model=given.model, options=given.options)  # a bad name fails here
        return cls(
            run_id=run_id,
            definition=definition.to_data(),
            task=task,
            store=store,
            workspace=str(Path(given.workspace).resolve()),
            provider=given.provider,
            model=given.model,
            options=public_options(provider),
            max_steps=given.max_steps,
            budget_usd=given.budget_usd,
            yes=given.yes,
            allow=list(given.allow) if given.allow else None,
        )

    def run_options(self) -> RunOptions:
        """The options a worker runs each of this run's turns with."""
        return RunOptions(
            provider=self.provider,
            model=self.model,
            options=self.options,
            workspace=self.workspace,
            yes=self.yes,
            max_steps=self.max_steps,
            budget_usd=self.budget_usd,
            allow=self.allow,
        )

    def pipeline(self) -> PipelineDefinition:
        return definition_from_data(self.definition, origin=f"run {self.run_id}")

    def config(self) -> dict[str, Any]:
        """The controller's config, the same as an in-process run's (see ``open_run``)."""
        return {"max_steps": self.max_steps, "budget_usd": self.budget_usd, "params": self.params, "yes": self.yes}

    def provider_for(self, role: str, definition: PipelineDefinition) -> Provider:
        binding = definition.roles.get(role)
        if binding is not None and binding.provider is not None:
            return create_provider(binding.provider, model=binding.model, options=binding.options)
        return create_provider(self.provider, model=self.model, options=self.options)


class UnknownRun(InvalidRequest):
    """The store holds no such run or turn: a worker pointed at another store. Retrying
    cannot help, so the engine fails the run with this message."""


class TurnNeeded(Exception):
    """Raised inside a re-drive where a turn has not run yet; ends that pass."""


@dataclass
class _StoredAgents:
    """Serves finished turns from the ledger; notes every turn that has not run."""

    ledger: RunLedger
    spec: RunSpec
    definition: PipelineDefinition
    needed: list[str] = field(default_factory=list)

    def identity(self, role: str) -> dict[str, Any]:
        try:
            return provider_identity(self.spec.provider_for(role, self.definition), self.spec.params)
        except SeamlineError as exc:  # the turn fails on record (see run_turn); the run goes on to say so
            binding = self.definition.roles.get(role)
            name = binding.provider if binding is not None and binding.provider else self.spec.provider
            return {"provider": name, "error": f"{exc.kind}: {exc.message}"}

    async def turn(self, key: AgentKey, prompt: str, *, budget_usd: float | None) -> AsyncIterator[Event]:
        name = turn_key(key.phase, key.role, key.round, key.attempt)
        events = self.ledger.finished_events(self.spec.run_id, name)
        if events is None:
            self.ledger.need(self.spec.run_id, name, prompt, budget_usd)
            self.needed.append(name)
            raise TurnNeeded(name)
        for data in events:
            yield msgspec.convert(data, _event_type)

    async def abort_all(self) -> None:
        return None


class MalformedRun(InvalidRequest):
    """The run's spec in the store cannot be read: no retry can fix it."""


def load_spec(store: SessionStore, run_id: str) -> RunSpec:
    """The run's spec as the client kept it; a spec no worker can read is a
    :class:`MalformedRun` (never retried), whatever is wrong with it."""
    try:
        data = RunLedger(store).spec(run_id)
    except LookupError as exc:
        raise UnknownRun(str(exc)) from None
    except RecursionError:  # nested deeper than the decoder goes: the same on every worker
        raise MalformedRun(f"the spec of run {run_id} is nested too deep to read") from None
    except ValueError as exc:  # the stored text is not JSON
        raise MalformedRun(f"the spec of run {run_id} is not JSON: {exc}") from None
    try:
        return msgspec.convert(data, RunSpec)
    except RecursionError:
        raise MalformedRun(f"the spec of run {run_id} is nested too deep to read") from None
    except msgspec.ValidationError as exc:
        raise MalformedRun(f"the spec of run {run_id} is malformed: {exc}") from None


def _open_existing(location: str) -> SessionStore:
    """The store a workflow names; a store file that does not exist is an :class:`UnknownRun`,
    never a new empty file (a worker on another host or with another folder layout)."""
    if not location.startswith(("postgresql://", "postgres://")) and not Path(location).is_file():
        raise UnknownRun(f"no store at {location} on this worker: it cannot reach the run's store")
    return open_store(location)


async def advance(store_location: str, run_id: str) -> dict[str, Any]:
    """One pass of the controller. Returns ``{"done": False, "needed": [keys]}`` or
    ``{"done": True, "report": {...}}`` (small: outcome, stop reason, exit code, trace)."""
    store = _open_existing(store_location)
    try:
        ledger = RunLedger(store)
        finished = ledger.report(run_id)
        if finished is not None:  # a retried last pass: the run already ended
            return {"done": True, "report": finished}
        spec = load_spec(store, run_id)
        definition = spec.pipeline()
        agents = _StoredAgents(ledger, spec, definition)
        writer = TraceWriter(None)
        controller = PipelineController(definition, agents=agents, writer=writer, run_id=run_id, config=spec.config())
        shown: list[Event] = []
        async for event in controller.run(spec.task):
            # Once a turn is missing, what follows (the failed phase, the abort) is not
            # the run's: only the controller's events before it are real and published.
            if isinstance(event, Raw) and event.source in ("run", "controller") and not agents.needed:
                shown.append(event)
        if agents.needed:
            ledger.publish_run_events(run_id, shown)
            return {"done": False, "needed": sorted(set(agents.needed))}
        path = Path(spec.trace_file) if spec.trace_file else trace_path(run_id, store_path=spec.store)

        def keep_trace() -> None:
            _write_whole(path, b"".join(writer.lines or []))
            anchor_head(store, run_id, writer.head_hash, writer.seq)

        report = controller.report
        shown.append(Complete(outcome=report.outcome, stop_reason=report.stop_reason, text=report.text))
        summary = {
            "run_id": run_id,
            "outcome": report.outcome,
            "stop_reason": report.stop_reason,
            "exit_code": exit_code_for(report.outcome, report.stop_reason),
            "head_hash": report.head_hash,
            "trace": str(path),
        }
        return {"done": True, "report": ledger.finish_run(run_id, summary, shown, keep_trace=keep_trace)}
    finally:
        store.close()


def _write_whole(path: Path, data: bytes) -> None:
    """Write the trace at once: a reader never sees half of it (a last pass retried before
    the run's end was recorded replaces it whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


async def run_turn(
    store_location: str,
    run_id: str,
    key: str,
    *,
    heartbeat: Callable[[], None] | None = None,
    worker: str | None = None,
) -> dict[str, Any]:
    """Run the role turn ``key`` of ``run_id`` (or return it as recorded when finished);
    ``worker`` names who runs it, in the turn's row; ``heartbeat`` is called after each
    event is published (the Temporal worker beats on a timer instead).

    Returns a small summary: key, outcome, usage, ``reused`` (True: nothing ran)."""
    store = _open_existing(store_location)
    try:
        ledger = RunLedger(store)
        found = ledger.turn(run_id, key)
        if found is None:
            raise UnknownRun(f"run {run_id} never asked for the turn {key}")
        if found["status"] == "finished":
            return _summary(key, found, reused=True)
        spec = load_spec(store, run_id)
        definition = spec.pipeline()
        phase, role, round_no, attempt = key.rsplit("/", 3)
        budget = found["budget_usd"]
        if spec.budget_usd is not None:  # the budget is shared through the store, whichever worker spent it
            left = max(spec.budget_usd - ledger.spent_usd(run_id), 0.0)
            budget = left if budget is None else min(budget, left)
        start_no = ledger.start(run_id, key, worker)
        kept: list[dict[str, Any]] = []
        cost: float | None = 0.0
        tokens_in = tokens_out = 0
        # What earlier starts of this turn spent (a worker killed mid-turn) was spent: it
        # counts in the turn's usage, so in the run's total and its shared budget.
        spent_before = ledger.earlier_usage(run_id, key, start_no) if start_no > 1 else []
        for usage in spent_before:
            tokens_in += int(usage.get("input_tokens") or 0)
            tokens_out += int(usage.get("output_tokens") or 0)
            paid = usage.get("cost_usd")
            cost = None if cost is None or paid is None else cost + float(paid)
        if budget is not None and cost:
            budget = max(budget - cost, 0.0)
        turn = _guarded(
            spec, definition, AgentKey(phase, role, int(round_no), int(attempt)), found["prompt"], budget, store
        )
        async with contextlib.aclosing(turn):  # the session closes even when recording fails
            async for event in turn:
                ledger.publish(run_id, key, start_no, event)
                if heartbeat is not None:
                    heartbeat()
                if isinstance(event, TextDelta | ReasoningDelta):
                    continue  # the re-drive needs the final text, which ``complete`` carries
                kept.append(msgspec.to_builtins(event))
                if isinstance(event, Usage):
                    tokens_in += event.input_tokens
                    tokens_out += event.output_tokens
                    cost = None if cost is None or event.cost_usd is None else cost + event.cost_usd
        if spent_before:  # after the turn's session event, as the spend happened in that session
            at = 1 if kept and kept[0].get("type") == "session" else 0
            kept[at:at] = spent_before
        ledger.finish(run_id, key, kept, cost_usd=cost, input_tokens=tokens_in, output_tokens=tokens_out)
        return _summary(key, ledger.turn(run_id, key) or {}, reused=False)
    finally:
        store.close()


def turn_session_id(run_id: str, key: str) -> str:
    """The session id of a role turn: the same on every start of the turn, whichever worker
    runs it, so a retried start finds the session the first one opened (and the provider
    session id the seam recorded for it) in the store."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"seamline:durable:{run_id}/{key}").hex


async def _guarded(
    spec: RunSpec,
    definition: PipelineDefinition,
    key: AgentKey,
    prompt: str,
    budget: float | None,
    store: SessionStore,
) -> AsyncGenerator[Event, None]:
    """The turn's events; a provider that fails to start or raises mid-turn ends the turn
    ``failed`` with a classified ``error``, as in a local run (the controller turns it into
    a role failure), instead of failing the activity over and over."""
    try:
        async for event in _role_turn(spec, definition, key, prompt, budget, store):
            yield event
    except SeamlineError as exc:
        failure: tuple[ErrorKind, str, bool] = (exc.kind, exc.message, exc.retryable)
    except Exception as exc:  # noqa: BLE001 - a provider's bug is a failure on record
        failure = ("provider", f"{type(exc).__name__}: {exc}", False)
    else:
        return
    yield Error(kind=failure[0], message=failure[1], retryable=failure[2])
    yield Complete(outcome="failed", stop_reason="error")


async def _role_turn(
    spec: RunSpec,
    definition: PipelineDefinition,
    key: AgentKey,
    prompt: str,
    budget: float | None,
    store: SessionStore,
) -> AsyncGenerator[Event, None]:
    """Open the turn's session, or resume it where an earlier start of the same turn opened
    it (a worker killed mid-turn, a timed-out activity): natively with the provider session
    id the store kept (agent CLIs, ACP), else from the store's transcript (model APIs)."""
    given = spec.run_options()
    ws = Workspace(given.workspace)
    provider = spec.provider_for(key.role, definition)
    tools = _workspace_tools(str(ws.root))
    if given.allow is not None:  # --allow: only these tools are offered, as in a local run
        tools = tools.restrict(given.allow)
    approval = permission_service(store=store, workspace=ws.root, yes=given.yes)
    sid = turn_session_id(spec.run_id, turn_key(key.phase, key.role, key.round, key.attempt))
    session: ProviderSession
    if store.get(sid) is not None:
        session = await provider.resume(sid, store=store, tools=tools, approval=approval)
    else:
        session = await provider.open(
            workspace=ws.root,
            store=store,
            tools=tools,
            approval=approval,
            session_id=sid,
            metadata={"run_id": spec.run_id, "phase": key.phase, "role": key.role, "round": key.round},
        )
    try:
        async for event in session.send(prompt, max_steps=given.max_steps, budget_usd=budget, params=spec.params):
            yield event
    finally:
        await provider.close(session)


@functools.lru_cache(maxsize=64)
def _workspace_tools(root: str) -> Toolset:
    """One tool set per workspace and worker process, shared by its turns as a local
    pipeline run shares one (building the schemas costs more than a scripted turn)."""
    return workspace_tools(Workspace(root))


def _summary(key: str, row: dict[str, Any], *, reused: bool) -> dict[str, Any]:
    events = row.get("events") or []
    final = events[-1] if events and events[-1].get("type") == "complete" else {}
    return {
        "key": key,
        "outcome": final.get("outcome", "failed"),
        "cost_usd": row.get("cost_usd"),
        "input_tokens": row.get("input_tokens"),
        "output_tokens": row.get("output_tokens"),
        "reused": reused,
    }
