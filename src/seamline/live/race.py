"""A race wired to live backends: a git worktree per racer, each racer's session on its
own provider in its worktree (one commit per turn, recorded in the store as a worktree
run, so ``seamline diff/merge/discard`` take it afterwards), and each run's check command
run in its worktree, in the racer's sandbox when it has one.

:func:`open_race` builds the controller of :func:`seamline.pipeline.race.race_definition`
on :class:`RaceAgents`; every racer's worktree is made before the run starts.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from seamline.errors import InvalidRequest, SeamlineError
from seamline.events import Complete, Event, Session, Usage
from seamline.gateway.cassette import CassetteUse
from seamline.live.agents import provider_identity
from seamline.pipeline.agents import AgentKey
from seamline.pipeline.controller import PipelineController
from seamline.pipeline.race import CHECK_PREFIX, REVIEW_PREFIX, CheckResult, race_definition, racer_of
from seamline.providers.base import Provider, ProviderSession
from seamline.sandbox.runtime import Sandbox
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.rules import permission_service
from seamline.sessions.trace_heads import anchor_head
from seamline.tools.base import Toolset
from seamline.tools.shell_output import run_unsandboxed
from seamline.trace.writer import TraceWriter, trace_path
from seamline.worktrees import Worktree, abandon, turn_committer
from seamline.worktrees.git import git

__all__ = ["RaceAgents", "Racer", "open_race"]

_CHECK_OUTPUT_CAP: Final = 64 * 1024


@dataclass
class Racer:
    """One racer: its label, its backend, its worktree, the tools made there (in its
    sandbox, if any), and more run options to keep with its session."""

    label: str
    provider: Provider
    tree: Worktree
    tools: Toolset
    sandbox: Sandbox | None = None
    stored: Mapping[str, object] = field(default_factory=dict)
    cassette: CassetteUse | None = None  # its model exchanges recorded to, or replayed from


@dataclass
class _Measured:
    outcome: str = "failed"
    cost_usd: float | None = 0.0
    elapsed_s: float = 0.0


@dataclass
class RaceAgents:
    """The race's agents: racer turns in their worktrees, checks, reviewer turns."""

    racers: Mapping[str, Racer]
    store: SessionStore
    reviewers: Mapping[str, Provider] = field(default_factory=dict)  # racer -> the backend reviewing it
    yes: bool = False
    max_steps: int = 50
    params: Mapping[str, Any] = field(default_factory=dict)
    run_id: str = ""
    check_timeout: float = 600.0
    measured: dict[str, _Measured] = field(default_factory=dict)
    opened: set[str] = field(default_factory=set)  # racers whose session the store records
    _open: dict[tuple[str, str, int, int], tuple[Provider, ProviderSession]] = field(default_factory=dict)
    _aborted: bool = False

    def identity(self, role: str) -> dict[str, Any]:
        if role in self.racers:
            return provider_identity(self.racers[role].provider, self.params)
        reviewer = self.reviewers.get(racer_of(role) or "") if role.startswith(REVIEW_PREFIX) else None
        if reviewer is not None:
            return provider_identity(reviewer, self.params)
        return {"provider": "check", "implementation": f"{__name__}:RaceAgents.check", "real": False}

    async def turn(self, key: AgentKey, prompt: str, *, budget_usd: float | None) -> AsyncIterator[Event]:
        racer = racer_of(key.role)
        if key.role in self.racers:
            stream = self._race(key, prompt, budget_usd)
        elif key.role.startswith(CHECK_PREFIX) and racer is not None and racer in self.racers:
            stream = self._check(racer, prompt)
        elif key.role.startswith(REVIEW_PREFIX) and racer is not None and racer in self.reviewers:
            stream = self._review(key, prompt, budget_usd)
        else:
            raise InvalidRequest(f"the race has no agent for role {key.role!r}")
        async for event in stream:
            yield event

    async def _race(self, key: AgentKey, prompt: str, budget_usd: float | None) -> AsyncIterator[Event]:
        racer = self.racers[key.role]
        tree = racer.tree
        started = time.perf_counter()
        measured = self.measured.setdefault(key.role, _Measured())
        session = await racer.provider.open(
            workspace=tree.workspace,
            store=self.store,
            tools=racer.tools,
            approval=permission_service(store=self.store, workspace=tree.workspace, yes=self.yes),
            session_id=tree.run_id,
            metadata={"race": self.run_id, "racer": key.role, "label": racer.label},
            cassette=racer.cassette,
        )
        self.opened.add(key.role)
        session.turn_hooks.append(turn_committer(tree))
        self.store.set_run_options(tree.run_id, {**racer.stored, "worktree": tree.record(), "race": self.run_id})
        async for event in self._send(key, racer.provider, session, prompt, budget_usd):
            if isinstance(event, Usage):
                spent = event.cost_usd
                measured.cost_usd = None if measured.cost_usd is None or spent is None else measured.cost_usd + spent
            elif isinstance(event, Complete):
                measured.outcome = event.outcome
                measured.elapsed_s = round(time.perf_counter() - started, 3)
            yield event

    async def _send(
        self, key: AgentKey, provider: Provider, session: ProviderSession, prompt: str, budget_usd: float | None
    ) -> AsyncIterator[Event]:
        self._open[key.as_tuple()] = (provider, session)
        try:
            async for event in session.send(
                prompt, max_steps=self.max_steps, budget_usd=budget_usd, params=self.params
            ):
                if self._aborted and not session.aborted:
                    await provider.abort(session)  # it opened after the race was stopped: it stops too
                yield event
        finally:
            self._open.pop(key.as_tuple(), None)
            await provider.close(session)

    async def _review(self, key: AgentKey, prompt: str, budget_usd: float | None) -> AsyncIterator[Event]:
        role = racer_of(key.role) or ""
        racer, reviewer = self.racers[role], self.reviewers[role]
        session = await reviewer.open(
            workspace=racer.tree.workspace,
            store=self.store,
            approval=permission_service(store=self.store, workspace=racer.tree.workspace, yes=False),
            metadata={"race": self.run_id, "reviews": racer.tree.run_id},
        )
        async for event in self._send(key, reviewer, session, prompt, budget_usd):
            yield event

    async def _check(self, role: str, command: str) -> AsyncIterator[Event]:
        racer = self.racers[role]
        tree = racer.tree
        measured = self.measured.get(role, _Measured())
        yield Session(session_id=f"{self.run_id[:12]}-{CHECK_PREFIX}{role}", provider="check", model=None)
        exit_code: int | None = None
        tail, error = "", None
        if command:
            try:
                exit_code, tail = await self._run_check(racer, command)
            except SeamlineError as exc:  # the sandbox refused it, or it ran past its time
                error = exc.message
        completed = measured.outcome == "completed"
        files, added, removed, head, diff = await asyncio.to_thread(_diff_figures, tree)
        result = CheckResult(
            racer=role,
            outcome=measured.outcome,
            passed=completed and (exit_code == 0 if command else True),
            exit_code=exit_code,
            command=command or None,
            tail=CheckResult.tail_of(tail),
            error=error,
            cost_usd=measured.cost_usd,
            elapsed_s=measured.elapsed_s,
            files=files,
            insertions=added,
            deletions=removed,
            commit=head if head != tree.base else None,
            session_id=tree.run_id,
            branch=tree.branch,
            diff=CheckResult.diff_of(diff),
        )
        yield Complete(outcome="completed", stop_reason="end_turn", text=result.encode())

    async def _run_check(self, racer: Racer, command: str) -> tuple[int, str]:
        if racer.sandbox is not None:
            ran = await racer.sandbox.execute(command, wall_s=self.check_timeout)
            return ran.outcome.returncode, ran.outcome.output.decode("utf-8", errors="replace")
        return await run_unsandboxed(
            command, cwd=Path(racer.tree.workspace), timeout=self.check_timeout, cap=_CHECK_OUTPUT_CAP
        )

    async def abort_all(self) -> None:
        self._aborted = True
        for provider, session in list(self._open.values()):
            await provider.abort(session)

    def release(self) -> None:
        """Remove the worktree of every racer whose session never opened (nothing records
        it, so nothing could merge or discard it later)."""
        for role, racer in self.racers.items():
            if role not in self.opened:
                abandon(racer.tree)


def _diff_figures(tree: Worktree) -> tuple[int, int, int, str, str]:
    """What the run committed: files changed, lines added and removed, its branch's head,
    and the diff itself."""
    repo = Path(tree.repo)
    numstat = git(["diff", "--numstat", tree.base, tree.branch, "--"], cwd=repo).out
    added = removed = files = 0
    for row in numstat.splitlines():
        plus, minus, _ = row.split("\t", 2)
        files += 1
        added += int(plus) if plus.isdigit() else 0  # "-" for a binary file
        removed += int(minus) if minus.isdigit() else 0
    head = git(["rev-parse", tree.branch], cwd=repo).out.strip()
    diff = git(["diff", "--no-color", "--no-ext-diff", tree.base, tree.branch, "--"], cwd=repo).out
    return files, added, removed, head, diff


def open_race(
    racers: Sequence[Racer],
    *,
    store: SessionStore,
    store_path: str | os.PathLike[str] | None = None,
    check: str | None = None,
    reviewers: Sequence[Provider] = (),
    yes: bool = False,
    max_steps: int = 50,
    budget_usd: float | None = None,
    check_timeout: float = 600.0,
    run_id: str | None = None,
    trace_file: str | os.PathLike[str] | None = None,
) -> tuple[PipelineController, RaceAgents]:
    """The controller of a race of ``racers`` (their worktrees made already), its trace
    beside the store, and its :class:`RaceAgents` (call ``release()`` once the run is
    over). ``reviewers``, one per racer in the same order, adds the review phase."""
    rid = run_id or uuid.uuid4().hex
    definition = race_definition(
        [r.label for r in racers], check=check, reviewer=bool(reviewers), budget_usd=budget_usd
    )
    if reviewers and len(reviewers) != len(racers):
        raise InvalidRequest("give one reviewer per racer, or none")
    for backend in (*(r.provider for r in racers), *reviewers):
        backend.check_budget(budget_usd)  # an unenforceable budget is refused before the race
    roles = [f"r{n}" for n in range(1, len(racers) + 1)]
    agents = RaceAgents(
        racers=dict(zip(roles, racers, strict=True)),
        store=store,
        reviewers=dict(zip(roles, reviewers, strict=True)) if reviewers else {},
        yes=yes,
        max_steps=max_steps,
        run_id=rid,
        check_timeout=check_timeout,
    )
    writer = TraceWriter(
        trace_file if trace_file is not None else trace_path(rid, store_path=store_path),
        on_flush=functools.partial(anchor_head, store, rid),
    )
    config: dict[str, Any] = {
        "max_steps": max_steps,
        "budget_usd": budget_usd,
        "params": {},
        "yes": yes,
        "check": check,
    }
    controller = PipelineController(definition, agents=agents, writer=writer, run_id=rid, config=config)
    return controller, agents
