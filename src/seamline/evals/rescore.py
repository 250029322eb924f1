"""``seamline eval rescore``: the kept trials checked again, no agent run, no model called.

Every trial whose agent turn ran to its check left a ref (``refs/seamline/evals/<run>``) on
its last commit. Rescoring checks that commit out in a temporary detached worktree, runs
the check (the task's own, or the one given) there, and writes the verdicts as a new
evaluation whose plan names the one it was rescored from; cost, tokens and time are the
original trial's. A trial that never reached its check keeps its verdict (failed).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import msgspec

from seamline.errors import SeamlineError
from seamline.evals.record import EvalPlan, EvalRecord, TrialResult
from seamline.tools.shell_output import run_unsandboxed
from seamline.worktrees.git import git

__all__ = ["CheckRunner", "rescore"]

_OUTPUT_CAP: Final = 64 * 1024
_TAIL: Final = 2000

#: Runs a check command in a folder: its exit code and output (the CLI's may sandbox it).
CheckRunner = Callable[[Path, str, float], Awaitable[tuple[int, str]]]


async def _plain(folder: Path, command: str, timeout: float) -> tuple[int, str]:
    return await run_unsandboxed(command, cwd=folder, timeout=timeout, cap=_OUTPUT_CAP)


async def rescore(
    record: EvalRecord, root: Path, *, check: str | None = None, run_check: CheckRunner = _plain
) -> tuple[EvalRecord, EvalPlan]:
    """Check ``record``'s trials again into a new evaluation under ``root``."""
    plan = record.plan()
    tasks = tuple(msgspec.structs.replace(t, check=check) for t in plan.tasks) if check else plan.tasks
    fields = msgspec.structs.asdict(plan) | {"tasks": tasks, "rescored_from": plan.id}
    fields.pop("id")
    fields.pop("created")
    new_record, new_plan = EvalRecord.create(root, fields)
    by_id = {t.id: t for t in tasks}
    order = {key: n for n, key in enumerate(plan.trial_keys())}
    for trial in sorted(record.trials(), key=lambda t: order.get(t.key, len(order))):
        task = by_id.get(trial.task)
        if task is None or trial.ref is None:
            new_record.add(trial)
            continue
        new_record.add(await _again(trial, Path(task.repository), task.check, task.timeout_s, run_check))
    new_record.set_status("completed", rescored_from=plan.id)
    return new_record, new_plan


async def _again(
    trial: TrialResult, repository: Path, command: str, timeout: float, run_check: CheckRunner
) -> TrialResult:
    top = git(["rev-parse", "--show-toplevel"], cwd=repository, check=False)
    if not top.ok:
        return msgspec.structs.replace(trial, passed=False, error=f"{repository} is no longer a git repository")
    repo = Path(top.out.strip())
    inside = repository.resolve().relative_to(repo.resolve())
    scratch = Path(tempfile.mkdtemp(prefix="seamline-rescore-"))
    folder = scratch / "tree"
    try:
        made = git(["worktree", "add", "--quiet", "--detach", str(folder), str(trial.ref)], cwd=repo, check=False)
        if not made.ok:
            return msgspec.structs.replace(trial, passed=False, error=f"the trial's commit is gone ({trial.ref})")
        try:
            code, output = await run_check(folder / inside, command, timeout)
        except SeamlineError as exc:
            return msgspec.structs.replace(trial, passed=False, exit_code=None, error=exc.message, check_tail="")
        return msgspec.structs.replace(
            trial,
            passed=trial.outcome == "completed" and code == 0,
            exit_code=code,
            error=None,
            check_tail=output[-_TAIL:],
        )
    finally:
        await asyncio.to_thread(_remove, repo, folder, scratch)


def _remove(repo: Path, folder: Path, scratch: Path) -> None:
    git(["worktree", "remove", "--force", str(folder)], cwd=repo, check=False)
    shutil.rmtree(scratch, ignore_errors=True)
    git(["worktree", "prune"], cwd=repo, check=False)
