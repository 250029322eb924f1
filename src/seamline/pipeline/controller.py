"""The controller: the only thing that moves a pipeline run.

It alone owns transitions, bounded retries, feedback revisions (every attempt stays in
the trace), termination and finalization. Roles are passive (see ``roles``); agent turns
go through an :class:`~seamline.pipeline.agents.Agents` (live providers, or recorded
responses for a re-drive). Everything that happens is appended to the trace, and the
run streams as events: provider events as they come, ``raw`` events from the
controller (source ``run`` / ``controller``) and one final ``complete`` for the run.

Stop reasons and outcomes stay distinct to the end:

=================== ========= ====
stop reason         outcome   exit
=================== ========= ====
converged/completed completed 0
failed              failed    1
budget              budget    3
oscillating         failed    4
exhausted           failed    5
vetoed              aborted   6
invalid_transition  aborted   7
cancelled           aborted   130
=================== ========= ====
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypedDict

import msgspec

from seamline._version import __version__
from seamline.definitions import ABORT_PHASE, PhaseSpec, PipelineDefinition
from seamline.errors import SeamlineError
from seamline.events import (
    Complete,
    Error,
    Event,
    Outcome,
    Raw,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
)
from seamline.exit_codes import OUTCOME_EXIT_CODES, STOP_EXIT_CODES
from seamline.pipeline.agents import AgentKey, Agents, prompt_hash
from seamline.pipeline.bus import AgentBus
from seamline.pipeline.convergence import ConvergenceDecision, Judgement, decide, failed_decision
from seamline.pipeline.guard import SpawnGuard
from seamline.pipeline.payloads import DecisionPayload, RunEndPayload, RunStartPayload, TransitionPayload
from seamline.pipeline.roles import AgentResponse, Role, RoleContext, RoleFailure, RoleOutput, build_role
from seamline.trace.fingerprint import split_event
from seamline.trace.records import SCHEMA_VERSION
from seamline.trace.schema import (
    DecisionData,
    EventData,
    GuardData,
    HeaderData,
    PhaseEndData,
    PhaseStartData,
    PhaseStatus,
    PromptData,
    RecordedDecision,
    RecordedFailure,
    RecordedOutput,
    RecordedUsage,
    RetryData,
    RoleEndData,
    RoleStartData,
    RunEndData,
    RunObserved,
    RunStartData,
    RunUsage,
    SkipData,
    TransitionData,
)
from seamline.trace.writer import TraceWriter
from seamline.usage import UsageTotals

__all__ = ["STOP_EXIT_CODES", "STOP_OUTCOMES", "PipelineController", "RunReport", "config_hash", "exit_code_for"]

STOP_OUTCOMES: Final[dict[str, Outcome]] = {
    "converged": "completed",
    "completed": "completed",
    "failed": "failed",
    "budget": "budget",
    "oscillating": "failed",
    "exhausted": "failed",
    "vetoed": "aborted",
    "invalid_transition": "aborted",
    "cancelled": "aborted",
}
_MAX_PHASE_VISITS: Final = 1000  # a cycle without a judge cannot spin forever


def exit_code_for(outcome: str, stop_reason: str) -> int:
    """The documented exit code: controller stop reasons first, then outcomes."""
    return STOP_EXIT_CODES.get(stop_reason, OUTCOME_EXIT_CODES.get(outcome, 1))


def config_hash(config: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass
class RunReport:
    """What a finished run gave, and where its evidence is."""

    run_id: str
    outcome: Outcome = "failed"
    stop_reason: str = "no_result"
    text: str = ""
    head_hash: str = ""
    fingerprint: str = ""
    definition_hash: str = ""
    transitions: list[tuple[str, str]] = field(default_factory=list)
    decisions: list[ConvergenceDecision] = field(default_factory=list)
    #: why a run that did not complete stopped (the failing role's classified error…)
    detail: str = ""

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.outcome, self.stop_reason)


class _Stop(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


_DONE: Final = object()


@dataclass
class _RunState:
    """Where a run stands between phases."""

    phase: PhaseSpec
    round_no: int = 1
    history: list[Judgement] = field(default_factory=list)
    evidence: dict[str, RoleOutput] = field(default_factory=dict)
    subject: RoleOutput | None = None
    feedback: str | None = None
    visits: int = 0
    final_phase: str = ABORT_PHASE
    stop: _Stop | None = None

    def advance(self, target: str, definition: PipelineDefinition) -> None:
        self.visits += 1
        if self.visits > _MAX_PHASE_VISITS:
            raise _Stop("exhausted", f"more than {_MAX_PHASE_VISITS} phase visits")
        self.phase = definition.phase(target)


class PipelineController:
    """Runs one pipeline definition once. Create, then iterate :meth:`run`.

    >>> # controller = PipelineController(definition, agents=LiveAgents(default=p), writer=w)
    >>> # async for event in controller.run("question"): ...
    """

    def __init__(
        self,
        definition: PipelineDefinition,
        *,
        agents: Agents,
        writer: TraceWriter,
        run_id: str | None = None,
        config: Mapping[str, Any] | None = None,
        guard: SpawnGuard | None = None,
        role_kinds: Mapping[str, Callable[..., Role]] | None = None,
    ) -> None:
        self.definition = definition
        self.agents = agents
        self.writer = writer
        self.run_id = run_id or uuid.uuid4().hex
        self.config = dict(config or {})
        limits = definition.team
        budget = self.config.get("budget_usd")
        cap = budget if budget is not None else limits.max_cost_usd
        self.guard = guard or SpawnGuard(
            max_depth=limits.max_depth,
            max_parallel=limits.max_parallel,
            max_tasks=limits.max_tasks,
            max_tokens=limits.max_tokens,
            max_cost_usd=cap,
        )
        self.bus = AgentBus(guard=self.guard)
        self.roles: dict[str, Role] = {
            name: build_role(name, binding, kinds=role_kinds) for name, binding in definition.roles.items()
        }
        self.report = RunReport(run_id=self.run_id, definition_hash=definition.definition_hash())
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._usage_by_role: dict[str, UsageTotals] = {}
        self._usage_by_phase: dict[str, UsageTotals] = {}
        self._cancelled = False
        self._guard_recorded = False

    # -- the run --------------------------------------------------------------------------
    async def run(self, task: str) -> AsyncIterator[Event]:
        """Drive the run to one terminal phase, streaming its events; the last is ``complete``."""
        yield self._start(task)
        run = _RunState(phase=self.definition.phases[0])
        w = self.writer
        try:
            while True:
                phase, round_no = run.phase, run.round_no
                w.append(PhaseStartData(phase=phase.name, round=round_no, roles=list(phase.bound_roles())))
                outputs: dict[str, RoleOutput] = {}
                failure: tuple[str, RoleFailure] | None = None
                try:
                    async for item in self._run_phase(phase, round_no, task, run.feedback, run.subject, run.evidence):
                        if not isinstance(item, tuple):
                            yield item
                        elif isinstance(item[1], RoleFailure):
                            failure = failure or (item[0], item[1])
                        else:
                            outputs[item[0]] = item[1]
                except SeamlineError as exc:  # the spawn guard refused a task
                    self.bus.cancel_all()
                    self._phase_end(phase, round_no, "stopped")
                    raise _Stop("budget" if exc.kind == "budget" else "failed", exc.message) from None
                self._check_not_stopped(phase, round_no)
                if failure is not None:
                    decided, stop = self._phase_failed(phase, run, failure)
                    if decided is not None:
                        yield decided
                    raise stop
                self._phase_end(phase, round_no, "ok")
                for role_name in phase.bound_roles():
                    run.evidence[role_name] = outputs[role_name]
                decided, target = (
                    self._judge(phase, run, outputs) if phase.judge else (None, self._follow(phase, run, outputs))
                )
                if decided is not None:
                    yield decided
                if isinstance(target, _Stop):
                    raise target
                yield self._transition(phase, target)
                self.report.transitions.append((phase.name, target))
                if target in self.definition.terminal_phases:
                    run.final_phase = target
                    break
                run.advance(target, self.definition)
        except _Stop as exc:
            run.stop = exc
            w.append(TransitionData(from_=run.phase.name, to=ABORT_PHASE, reason=exc.reason, detail=exc.detail))
            self.report.transitions.append((run.phase.name, ABORT_PHASE))
            yield self._controller_event(
                TransitionPayload(
                    run_id=self.run_id, what="transition", source=run.phase.name, target=ABORT_PHASE, reason=exc.reason
                )
            )
        except BaseException:
            # Cancelled from outside: what is recorded stays on disk, marked unfinished.
            w.flush()
            raise
        for event in self._finish(run):
            yield event

    def _start(self, task: str) -> Raw:
        """Write the header and ``run_start``; the run's first event."""
        d = self.definition
        providers = {r: self.agents.identity(r) for r, role in self.roles.items() if role.uses_agent}
        header = HeaderData(
            schema_version=SCHEMA_VERSION,
            pipeline=d.name,
            definition=d.to_data(),
            definition_hash=self.report.definition_hash,
            task=task,
            prompt_hash=prompt_hash(task),
            config=self.config,
            config_hash=config_hash(self.config),
            providers=providers,
            roles={name: role.identity() for name, role in self.roles.items()},
            seamline_version=__version__,
        )
        w = self.writer
        w.append(header, RunObserved(run_id=self.run_id))
        w.append(RunStartData(pipeline=d.name, first_phase=d.phases[0].name), RunObserved(run_id=self.run_id))
        w.flush()
        started = RunStartPayload(run_id=self.run_id, pipeline=d.name, definition_hash=header.definition_hash)
        return Raw(source="run", payload=msgspec.to_builtins(started))

    def _check_not_stopped(self, phase: PhaseSpec, round_no: int) -> None:
        """After a phase: the spawn guard's budget or a cancel stops the run here."""
        stopped: _Stop | None = None
        if self.guard.stopped is not None:
            stopped = _Stop("budget", self.guard.stopped.message)
        elif self._cancelled:
            stopped = _Stop("cancelled", "the run was cancelled")
        if stopped is not None:
            self._phase_end(phase, round_no, "stopped")
            raise stopped

    def _phase_failed(
        self, phase: PhaseSpec, run: _RunState, failure: tuple[str, RoleFailure]
    ) -> tuple[Raw | None, _Stop]:
        """A role failed: the phase ends ``failed``; a judge phase records a failed decision."""
        self._phase_end(phase, run.round_no, "failed")
        role_name, fail = failure
        if fail.kind == "budget":
            return None, _Stop("budget", f"{role_name}: {fail.message}")
        decided = None
        if phase.judge:
            decision = failed_decision(f"{role_name} failed: {fail.message}", run.history, self.definition.convergence)
            self._record_decision(phase, run.round_no, decision)
            decided = self._controller_event(DecisionPayload(run_id=self.run_id, what="decision", decision=decision))
        return decided, _Stop("failed", f"{role_name} failed ({fail.kind}): {fail.message}")

    def _judge(
        self, phase: PhaseSpec, run: _RunState, outputs: dict[str, RoleOutput]
    ) -> tuple[Raw | None, str | _Stop]:
        """A judge phase: the convergence decision, and where it leads (or why the run stops)."""
        d = self.definition
        judged = [outputs[r] for r in phase.bound_roles()][-1]
        if judged.verdict is None:
            return None, _Stop("failed", f"judge phase {phase.name!r} got no verdict")
        subject_hash = hashlib.sha256((run.subject.text if run.subject else "").encode()).hexdigest()
        run.history.append(Judgement(judged.verdict, judged.confidence, subject_hash))
        decision = decide(run.history, d.convergence)
        self._record_decision(phase, run.round_no, decision)
        decided = self._controller_event(DecisionPayload(run_id=self.run_id, what="decision", decision=decision))
        if decision.status == "continue":
            run.feedback = judged.feedback
            run.round_no += 1
            return decided, phase.on_continue or d.next_of(phase)
        if decision.status == "converged":
            return decided, d.next_of(phase)
        return decided, _Stop(decision.status, decision.reason)

    def _follow(self, phase: PhaseSpec, run: _RunState, outputs: dict[str, RoleOutput]) -> str:
        """A working phase: its output is the new subject; it goes on, or skips as it asks."""
        d = self.definition
        run.subject = outputs[phase.bound_roles()[-1]]
        target = d.next_of(phase)
        if run.subject.skip is not None and target not in d.terminal_phases:
            target = self._skip(phase, target, run.subject.skip)
        return target

    def _transition(self, phase: PhaseSpec, target: str) -> Raw:
        if not self.definition.allowed(phase.name, target):
            raise _Stop("invalid_transition", f"{phase.name} -> {target} is not an allowed transition")
        self.writer.append(TransitionData(from_=phase.name, to=target, reason="next"))
        self.writer.flush()
        return self._controller_event(
            TransitionPayload(run_id=self.run_id, what="transition", source=phase.name, target=target)
        )

    def _finish(self, run: _RunState) -> tuple[Event, ...]:
        """Write ``run_end``, fill in the report; the run's last two events."""
        stop = run.stop
        if stop is None:
            converged = any(dec.status == "converged" for dec in self.report.decisions)
            stop_reason = "converged" if converged else "completed"
            if run.final_phase == ABORT_PHASE:
                stop_reason = "vetoed"
        else:
            stop_reason = stop.reason
        outcome = STOP_OUTCOMES.get(stop_reason, "failed")
        text = run.subject.text if run.subject is not None else ""
        usage = RunUsage(
            by_role={k: RecordedUsage.of(v) for k, v in sorted(self._usage_by_role.items())},
            by_phase={k: RecordedUsage.of(v) for k, v in sorted(self._usage_by_phase.items())},
            total=RecordedUsage.of(self._total()),
        )
        detail = stop.detail if stop is not None else msgspec.UNSET
        w = self.writer
        end = RunEndData(outcome=outcome, stop_reason=stop_reason, text=text, usage=usage, detail=detail)
        w.append(end, RunObserved(run_id=self.run_id))
        w.flush()
        r = self.report
        r.outcome, r.stop_reason, r.text = outcome, stop_reason, text
        r.detail = stop.detail if stop is not None else ""
        r.head_hash, r.fingerprint = w.head_hash, w.fingerprint.hex
        summary = RunEndPayload(
            run_id=self.run_id,
            outcome=outcome,
            stop_reason=stop_reason,
            definition_hash=r.definition_hash,
            head_hash=r.head_hash,
            fingerprint=r.fingerprint,
            trace=str(w.path) if w.path is not None else None,
            usage=usage.total,
            detail=detail,
        )
        ended = Raw(source="run", payload=msgspec.to_builtins(summary))
        return ended, Complete(outcome=outcome, stop_reason=stop_reason, text=text)

    async def cancel(self) -> None:
        """Stop the run: in-flight turns are aborted, the run ends ``aborted`` / ``cancelled``."""
        self._cancelled = True
        await self.agents.abort_all()

    # -- phases and roles -----------------------------------------------------------------
    async def _run_phase(
        self,
        phase: PhaseSpec,
        round_no: int,
        task: str,
        feedback: str | None,
        subject: RoleOutput | None,
        evidence: dict[str, RoleOutput],
    ) -> AsyncIterator[Event | tuple[str, RoleOutput | RoleFailure]]:
        frozen = dict(evidence)  # roles see a copy; only the controller files evidence
        handles = []
        for role_name in phase.bound_roles():
            ctx_base = RoleContext(
                task=task,
                phase=phase.name,
                role=role_name,
                round=round_no,
                attempt=1,
                feedback=feedback,
                subject=subject,
                evidence=dict(frozen),  # each role its own copy: no role can alter what another sees
            )

            def work(name: str = role_name, ctx: RoleContext = ctx_base) -> Any:
                return self._act_with_retries(phase, name, ctx)

            handles.append(self.bus.submit(role_name, work))
        pending = len(handles)
        while pending:
            item = await self._queue.get()
            if item is _DONE:
                pending -= 1
                continue
            yield item  # type: ignore[misc]
        results = await self.bus.collect(handles)
        for role_name, result in zip(phase.bound_roles(), results, strict=True):
            if isinstance(result, BaseException):
                message = f"{type(result).__name__}: {result}"
                yield role_name, RoleFailure(kind=getattr(result, "kind", "provider"), message=message)
            else:
                yield role_name, result

    async def _act_with_retries(self, phase: PhaseSpec, role_name: str, ctx: RoleContext) -> RoleOutput | RoleFailure:
        try:
            policy = self.definition.retry
            attempt = 1
            while True:
                ctx = msgspec.structs.replace(ctx, attempt=attempt)
                result = await self._act(phase, role_name, ctx)
                retry = (
                    isinstance(result, RoleFailure)
                    and result.retryable
                    and result.kind in policy.retry_on
                    and attempt < policy.max_attempts
                    and self.guard.stopped is None
                    and not self._cancelled
                )
                if not retry:
                    return result
                assert isinstance(result, RoleFailure)
                self.writer.append(
                    RetryData(phase=phase.name, role=role_name, round=ctx.round, attempt=attempt, reason=result.kind)
                )
                attempt += 1
        finally:
            self._queue.put_nowait(_DONE)

    async def _act(self, phase: PhaseSpec, role_name: str, ctx: RoleContext) -> RoleOutput | RoleFailure:
        role = self.roles[role_name]
        if phase.name not in self.definition.phases_of(role_name):  # pragma: no cover - validate() guarantees it
            return RoleFailure(kind="invalid_request", message=f"role {role_name} is not bound to phase {phase.name}")
        w = self.writer
        key = AgentKey(phase.name, role_name, ctx.round, ctx.attempt)
        w.append(RoleStartData(**_where(key)))
        totals = UsageTotals()
        result: RoleOutput | RoleFailure
        try:
            if role.uses_agent:
                prompt = role.prompt(ctx)
                identity = self.agents.identity(role_name)
                w.append(PromptData(**_where(key), prompt=prompt, prompt_hash=prompt_hash(prompt), provider=identity))
                response = await self._turn(key, prompt, totals)
                result = role.interpret(ctx, response)
            else:
                result = role.decide(ctx)
        except SeamlineError as exc:
            result = RoleFailure(kind=exc.kind, message=exc.message, retryable=exc.retryable)
        except Exception as exc:  # noqa: BLE001 - a role's or provider's bug is a failure on record, not a crash
            result = RoleFailure(kind="provider", message=f"{type(exc).__name__}: {exc}")
        self._usage_by_role.setdefault(role_name, UsageTotals()).merge(totals)
        self._usage_by_phase.setdefault(phase.name, UsageTotals()).merge(totals)
        w.append(_role_end(key, result, totals))
        w.flush()
        return result

    async def _turn(self, key: AgentKey, prompt: str, totals: UsageTotals) -> AgentResponse:
        w = self.writer
        where = _where(key)
        calls: dict[str, str] = {}
        reads: dict[str, str] = {}
        error: Error | None = None
        final: Complete | None = None
        source = self.agents.turn(key, prompt, budget_usd=self.guard.remaining_usd())
        try:
            async for event in source:
                self._queue.put_nowait(event)
                kind = type(event)
                if kind is TextDelta or kind is ReasoningDelta:
                    continue  # the final text is in ``complete``; deltas would only bloat the trace
                d, o = split_event(event)
                seq = w.append(EventData(**where, event=d), o)
                if isinstance(event, Usage):
                    totals.add(event)
                    stopped = self.guard.charge(event)
                    if stopped is not None and not self._guard_recorded:
                        self._guard_recorded = True
                        w.append(
                            GuardData(
                                **where,
                                limit=stopped.limit,
                                spent=stopped.spent,
                                cap=stopped.cap,
                                at_seq=seq,
                            )
                        )
                        await self.agents.abort_all()
                elif isinstance(event, ToolCall) and event.name == "read_file":
                    calls[event.call_id] = str(event.arguments.get("path", ""))
                elif isinstance(event, ToolResult) and event.call_id in calls and not event.is_error:
                    reads[calls[event.call_id]] = event.output
                elif isinstance(event, Error):
                    error = event
                elif isinstance(event, Complete):
                    final = event
        finally:
            closer = getattr(source, "aclose", None)
            if closer is not None:
                await closer()
        if final is None:
            final = Complete(outcome="failed", stop_reason="no_result")
        if self.guard.stopped is not None and final.outcome == "completed":
            final = Complete(outcome="budget", stop_reason="budget", text=final.text)
        return AgentResponse(
            text=final.text,
            outcome=final.outcome,
            stop_reason=final.stop_reason,
            reads=reads,
            error_kind=error.kind if error is not None else None,
            error_message=error.message if error is not None else None,
        )

    # -- bookkeeping ----------------------------------------------------------------------
    def _skip(self, phase: PhaseSpec, target: str, reason: str) -> str:
        allowed = self.definition.skip_reasons.get(target, ())
        if reason not in allowed:
            raise _Stop(
                "invalid_transition", f"{phase.name} asked to skip {target} for an undeclared reason {reason!r}"
            )
        self.writer.append(SkipData(phase=target, reason=reason))
        return self.definition.next_of(self.definition.phase(target))

    def _record_decision(self, phase: PhaseSpec, round_no: int, decision: ConvergenceDecision) -> None:
        self.report.decisions.append(decision)
        self.writer.append(DecisionData(phase=phase.name, round=round_no, decision=_decision_part(decision)))

    def _phase_end(self, phase: PhaseSpec, round_no: int, status: PhaseStatus) -> None:
        self.writer.append(PhaseEndData(phase=phase.name, round=round_no, status=status))

    @staticmethod
    def _controller_event(payload: TransitionPayload | DecisionPayload) -> Raw:
        return Raw(source="controller", payload=msgspec.to_builtins(payload))

    def _total(self) -> UsageTotals:
        total = UsageTotals()
        for item in self._usage_by_role.values():
            total.merge(item)
        return total


class _Where(TypedDict):
    """Where a role acts: the fields every role-scoped trace record starts with."""

    phase: str
    role: str
    round: int
    attempt: int


def _where(key: AgentKey) -> _Where:
    return {"phase": key.phase, "role": key.role, "round": key.round, "attempt": key.attempt}


def _role_end(key: AgentKey, result: RoleOutput | RoleFailure, totals: UsageTotals) -> RoleEndData:
    """The ``role_end`` part of an attempt: its output or failure, and its usage."""
    usage = RecordedUsage.of(totals)
    if isinstance(result, RoleFailure):
        failure = RecordedFailure(kind=result.kind, message=result.message, retryable=result.retryable)
        return RoleEndData(**_where(key), status="failed", failure=failure, usage=usage)
    output = RecordedOutput(
        text=result.text,
        verdict=result.verdict,
        confidence=result.confidence,
        feedback=result.feedback,
        skip=result.skip,
        data=result.data,
    )
    return RoleEndData(**_where(key), status="ok", output=output, usage=usage)


def _decision_part(decision: ConvergenceDecision) -> RecordedDecision:
    return RecordedDecision(
        confidences=list(decision.confidences),
        iteration=decision.iteration,
        reason=decision.reason,
        status=decision.status,
        strategy=decision.strategy,
        verdicts=list(decision.verdicts),
        window_hash=decision.window_hash,
    )
