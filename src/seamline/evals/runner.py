"""Running an evaluation's trials over the race's machinery (:class:`seamline.live.race.RaceAgents`).

Each trial (a task, a variant, a sample) is a worktree run of its own on its own branch: the
task's set-up command, one turn of the variant's backend on the prompt, then the task's
check command in the worktree (in the racer's sandbox when it has one), measured as a
race's check is. A finished trial is written to the evaluation's record at once; its
worktree is discarded unless the plan keeps them (the diff and the check's output stay
in the record, the session in the store).

One budget covers the whole evaluation: each trial is given what is left, every trial's
spending is counted as it streams, and once the budget is spent the trials still running
are aborted and the evaluation ends ``budget``; what finished is kept. An interruption
(:meth:`EvalRun.stop`) aborts the running trials without recording them, so ``resume``
runs them again.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

import msgspec

from seamline.errors import SeamlineError
from seamline.evals.dataset import Task
from seamline.evals.judge import JudgeFactory, judge_trial
from seamline.evals.record import EvalPlan, EvalRecord, TrialResult, Variant, missing
from seamline.events import Complete, Usage
from seamline.gateway.cassette import CassetteUse
from seamline.live.race import RaceAgents, Racer
from seamline.pipeline.agents import AgentKey
from seamline.pipeline.race import CheckResult
from seamline.sessions.portable_store import SessionStore
from seamline.tools.shell_output import run_unsandboxed
from seamline.worktrees import Worktree, abandon
from seamline.worktrees import create as create_worktree
from seamline.worktrees.git import git
from seamline.worktrees.runs import discard

__all__ = ["EvalRun", "RacerFactory", "starting_points"]

_SETUP_OUTPUT_CAP: Final = 64 * 1024
_RACE: Final = AgentKey(phase="race", role="r1", round=1, attempt=1)
_CHECK: Final = AgentKey(phase="check", role="check-r1", round=1, attempt=1)

#: Builds a trial's racer (its backend, tools and sandbox) in a fresh worktree.
RacerFactory = Callable[[Variant, Worktree], Racer]


@dataclass
class EvalRun:
    """One run (or resumption) of an evaluation's missing trials."""

    plan: EvalPlan
    record: EvalRecord
    store: SessionStore
    make_racer: RacerFactory
    make_judge: JudgeFactory | None = None
    replaying: EvalRecord | None = None  # replay each trial from this evaluation's cassettes
    yes: bool = False
    progress: TextIO | None = field(default_factory=lambda: sys.stderr)
    status: str = "running"
    _spent: float = 0.0
    _unknown_cost: bool = False
    _running: dict[tuple[str, str, int], RaceAgents] = field(default_factory=dict)
    _done: int = 0
    _passed: int = 0
    _stopping: bool = False
    _replayed: dict[tuple[str, str, int], TrialResult] | None = None

    async def run(self) -> str:
        """Run every missing trial; the evaluation's status (``completed``, ``budget``, ``aborted``)."""
        finished = self.record.trials()
        self._done = len(finished)
        self._passed = sum(t.passed for t in finished)
        self._spent = sum(t.cost_usd or 0.0 for t in finished)
        todo = list(missing(self.plan, finished))
        tasks = {t.id: t for t in self.plan.tasks}
        variants = {v.label: v for v in self.plan.variants}
        self.record.set_status("running")
        queue: asyncio.Queue[tuple[str, str, int]] = asyncio.Queue()
        for key in todo:
            queue.put_nowait(key)
        self._note(len(todo))

        async def worker() -> None:
            while not self._stopping and self._budget_left() != 0.0:
                try:
                    key = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                result = await self._trial(key, tasks[key[0]], variants[key[1]])
                if result is not None:
                    self.record.add(result)
                    self._done += 1
                    self._passed += result.passed
                self._note(queue.qsize())

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(max(1, min(self.plan.concurrency, len(todo)))):
                    group.create_task(worker())
        finally:
            if self.status == "running":
                self.status = "aborted" if self._stopping else "completed"
            if self.status == "completed" and len(self.record.trials()) < len(self.plan.trial_keys()):
                self.status = "budget"
            self.record.set_status(self.status, spent_usd=self._spent)
        return self.status

    def _originals(self) -> dict[tuple[str, str, int], TrialResult]:
        if self._replayed is None:
            assert self.replaying is not None
            self._replayed = {t.key: t for t in self.replaying.trials()}
        return self._replayed

    async def stop(self) -> bool:
        """Abort the running trials (they are not recorded) and start no other."""
        self._stopping = True
        for agents in list(self._running.values()):
            await agents.abort_all()
        return True

    def _budget_left(self) -> float | None:
        if self.plan.budget_usd is None:
            return None
        return max(0.0, self.plan.budget_usd - self._spent)

    async def _spend(self, cost: float | None) -> None:
        if cost is None:
            self._unknown_cost = True
            return
        self._spent += cost
        if self.plan.budget_usd is not None and self._spent >= self.plan.budget_usd and self.status == "running":
            self.status = "budget"
            for agents in list(self._running.values()):
                await agents.abort_all()

    async def _trial(self, key: tuple[str, str, int], task: Task, variant: Variant) -> TrialResult | None:
        run_id = uuid.uuid4().hex
        branch = f"seamline/eval-{self.plan.id[:8]}-{run_id[:8]}"
        start, cassette = task.commit, None
        if self.replaying is not None:
            original = self._originals().get(key)
            if original is None or original.cassette is None:
                return original  # nothing to replay it from: its verdict as it was
            start = original.base or start
            cassette = CassetteUse(self.replaying.cassettes / original.cassette, "replay")
        elif self.plan.record:
            self.record.cassettes.mkdir(exist_ok=True)
            cassette = CassetteUse(self.record.cassettes / f"{run_id}.jsonl", "record")
        try:
            tree = await asyncio.to_thread(
                create_worktree,
                task.repository,
                run_id=run_id,
                store=self.store.location,
                branch=branch,
                start=start,
            )
        except SeamlineError as exc:
            return _failed(key, "failed", exc.message, "")
        agents: RaceAgents | None = None
        try:
            racer = self.make_racer(variant, tree)
            racer.cassette = cassette
            agents = RaceAgents(
                racers={"r1": racer},
                store=self.store,
                yes=self.yes,
                max_steps=self.plan.max_steps,
                run_id=self.plan.id,
                check_timeout=task.timeout_s,
            )
            if task.setup:
                code, output = await run_unsandboxed(
                    task.setup, cwd=Path(tree.workspace), timeout=task.timeout_s, cap=_SETUP_OUTPUT_CAP
                )
                if code != 0:
                    return _failed(key, "setup", f"the set-up command exited {code}", output)
            self._running[key] = agents
            tokens = await self._turn(agents, task)
            if self._stopping or (self.status == "budget" and agents.measured["r1"].outcome != "completed"):
                return None if self._stopping else self._from_check(key, agents, None, tokens)
            check = None
            async for event in agents.turn(_CHECK, task.check, budget_usd=None):
                if isinstance(event, Complete) and event.text:
                    check = msgspec.json.decode(event.text, type=CheckResult)
            result = self._from_check(key, agents, check, tokens)
            kept = await asyncio.to_thread(_keep, tree, check)
            taped = cassette.path.name if cassette is not None and cassette.mode == "record" else None
            result = msgspec.structs.replace(result, base=tree.base, ref=kept, cassette=taped)
            if check is not None and task.rubric and self.make_judge is not None and not self._stopping:
                result = await self._judged(result, task, tree)
            return result
        except SeamlineError as exc:
            return _failed(key, "failed", exc.message, "")
        finally:
            self._running.pop(key, None)
            await asyncio.to_thread(self._tidy, tree, agents)

    async def _judged(self, result: TrialResult, task: Task, tree: Worktree) -> TrialResult:
        assert self.make_judge is not None and task.rubric
        left = self._budget_left()
        if left == 0.0:
            return result
        judgement = await judge_trial(
            self.make_judge(),
            workspace=Path(tree.workspace),
            store=self.store,
            prompt=task.prompt,
            rubric=task.rubric,
            passed=result.passed,
            diff=result.diff,
            max_steps=self.plan.max_steps,
            budget_usd=left,
            metadata={"eval": self.plan.id, "judges": tree.run_id},
        )
        await self._spend(judgement.cost_usd)
        return msgspec.structs.replace(
            result, judge_verdict=judgement.verdict, judge_score=judgement.score, judge_cost_usd=judgement.cost_usd
        )

    async def _turn(self, agents: RaceAgents, task: Task) -> tuple[int, int]:
        left = self._budget_left()
        budgets = [b for b in (task.budget_usd, left) if b is not None]
        tokens = [0, 0]

        async def drain() -> None:
            async for event in agents.turn(_RACE, task.prompt, budget_usd=min(budgets) if budgets else None):
                if isinstance(event, Usage):
                    tokens[0] += event.input_tokens or 0
                    tokens[1] += event.output_tokens or 0
                    await self._spend(event.cost_usd)

        turn = asyncio.ensure_future(drain())
        done, _ = await asyncio.wait({turn}, timeout=task.timeout_s)
        if not done:
            await agents.abort_all()
            await turn
        else:
            turn.result()
        return tokens[0], tokens[1]

    def _from_check(
        self, key: tuple[str, str, int], agents: RaceAgents, check: CheckResult | None, tokens: tuple[int, int]
    ) -> TrialResult:
        measured = agents.measured.get("r1")
        trial: dict[str, Any] = {
            "task": key[0],
            "variant": key[1],
            "sample": key[2],
            "input_tokens": tokens[0],
            "output_tokens": tokens[1],
        }
        if check is None:
            outcome = measured.outcome if measured else "failed"
            return TrialResult(
                **trial,
                passed=False,
                outcome=outcome,
                error=f"the run ended {outcome}; the check did not run",
                cost_usd=measured.cost_usd if measured else None,
                elapsed_s=measured.elapsed_s if measured else 0.0,
            )
        return TrialResult(
            **trial,
            passed=check.passed,
            outcome=check.outcome,
            exit_code=check.exit_code,
            error=check.error,
            cost_usd=check.cost_usd,
            elapsed_s=check.elapsed_s,
            files=check.files,
            insertions=check.insertions,
            deletions=check.deletions,
            session_id=check.session_id,
            branch=check.branch,
            commit=check.commit,
            check_tail=check.tail,
            diff=check.diff,
        )

    def _tidy(self, tree: Worktree, agents: RaceAgents | None) -> None:
        if agents is None or "r1" not in agents.opened:
            abandon(tree)  # nothing records it
        elif not self.plan.keep:
            try:
                discard(tree.run_id, store=self.store)
            except SeamlineError:
                abandon(tree)

    def _note(self, left: int) -> None:
        if self.progress is None:
            return
        total = len(self.plan.trial_keys())
        budget = f" of ${self.plan.budget_usd:.2f}" if self.plan.budget_usd is not None else ""
        unknown = " (some prices unknown)" if self._unknown_cost else ""
        print(
            f"eval {self.plan.id[:12]}: {self._done}/{total} done, {len(self._running)} running, {left} left, "
            f"{self._passed} passed, ${self._spent:.4f}{budget} spent{unknown}",
            file=self.progress,
            flush=True,
        )


def _keep(tree: Worktree, check: CheckResult | None) -> str | None:
    """A ref on the trial's last commit, so ``rescore`` finds its files once the branch is gone."""
    if check is None:
        return None
    ref = f"refs/seamline/evals/{tree.run_id}"
    made = git(["update-ref", ref, check.commit or tree.base], cwd=Path(tree.repo), check=False)
    return ref if made.ok else None


def starting_points(tasks: Sequence[Task]) -> list[str]:
    """What keeps the tasks from starting: a repository that is not a git repository with a
    commit, or a ``commit`` it does not have; one line each, empty when all can start."""
    problems: list[str] = []
    for repository, commit in sorted({(t.repository, t.commit or "HEAD") for t in tasks}):
        found = git(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{commit}^{{commit}}"],
            cwd=Path(repository),
            check=False,
        )
        if not found.ok:
            problems.append(f"{repository}: no commit {commit!r} (is it a git repository with that commit?)")
    return problems


def _failed(key: tuple[str, str, int], outcome: str, error: str, output: str) -> TrialResult:
    return TrialResult(
        task=key[0],
        variant=key[1],
        sample=key[2],
        passed=False,
        outcome=outcome,
        error=error,
        check_tail=output[-2000:],
        elapsed_s=0.0,
    )
