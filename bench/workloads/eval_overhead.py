"""Evaluations: what ``seamline eval`` itself spends per trial, beside the trial's agent time.

An evaluation of ``TASKS`` tasks x ``SAMPLES`` samples of one scripted variant (one
``write_file`` call, then an answer: the agent's time is at its floor) in a repository of
``FILES`` small files, run in-process as ``seamline eval`` runs it (``EvalRun`` over the
race's agents, a SQLite store, one trial at a time, no sandbox). Each trial's parts are
timed by wrapping the functions the runner calls:

- ``worktree_create``: ``git worktree add`` of the task's repository on the trial's branch;
- ``agent``: the backend's turn (session opened and stored, two model calls, the file
  written, the turn's commit in the worktree);
- ``check``: the task's check command in the worktree plus the race's measuring of the
  run (files and lines changed, the diff); ``check_command`` is the command alone;
- ``scoring``: the verdict built from the check and the ref ``rescore`` keeps;
- ``record_write``: the trial's line appended to ``trials.jsonl`` and synced;
- ``discard``: the worktree and its branch removed, the session marked discarded.

``overhead`` is a trial's whole time less its agent time (``other``: what no part above
holds — the racer built, the race's agents set up); ``ratio`` is overhead ÷ agent.
Beside them, the floor of the agent's time: the same scripted run made plainly by
``seamline.run`` in a folder; and the floor of a worktree's life, bare ``git worktree add``
+ ``worktree remove`` + ``branch -D`` of the same repository (``bare_git_add_remove``, beside
``create_and_discard``). ``figures_ms_per_trial`` is the numbers (pass@k, intervals,
comparisons) computed from the record, per trial. Every trial must pass its check, every
line must be in the record, and no branch or worktree may remain.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import seamline
from seamline.evals import runner as eval_runner
from seamline.evals.dataset import Task
from seamline.evals.record import EvalRecord, Variant
from seamline.evals.report import report
from seamline.live.race import RaceAgents, Racer
from seamline.providers.registry import create_provider
from seamline.sessions.sqlite_store import open_store
from seamline.testing import scripted
from seamline.tools.workspace import Workspace, workspace_tools

FILES = 200
PARTS = ("worktree_create", "agent", "check", "check_command", "scoring", "record_write", "discard")


def _script() -> list[dict[str, Any]]:
    call = {"name": "write_file", "arguments": {"path": "answer.txt", "content": "ok\n"}}
    return [{"tool_calls": [call]}, {"text": "done"}]


def _repo(root: Path, files: int) -> Path:
    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    for i in range(files):
        (repo / "src" / f"f{i:03}.py").write_text(f"value = {i}\n" * 20)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    who = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    for args in (["init", "--quiet", "--initial-branch=main"], ["add", "."], ["commit", "--quiet", "-m", "init"]):
        subprocess.run(["git", *who, *args], cwd=repo, env=env, check=True, capture_output=True)
    return repo


class _Clock:
    """Seconds spent in each wrapped part, one list entry per call."""

    def __init__(self) -> None:
        self.spent: dict[str, list[float]] = defaultdict(list)

    def sync(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[name].append(time.perf_counter() - started)

        return timed

    def coro(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.spent[name].append(time.perf_counter() - started)

        return timed

    def stream(self, name: str, fn: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
        @functools.wraps(fn)
        async def timed(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            started = time.perf_counter()
            try:
                async for item in fn(*args, **kwargs):
                    yield item
            finally:
                self.spent[name].append(time.perf_counter() - started)

        return timed


@contextmanager
def _timed(clock: _Clock) -> Generator[None]:
    """The runner's parts wrapped with ``clock``; every original put back afterwards."""
    # What the runner calls, by name: the module's globals, and methods of its classes.
    wanted: list[tuple[Any, str, str, str]] = [
        (eval_runner, "create_worktree", "worktree_create", "sync"),
        (eval_runner, "_keep", "keep_ref", "sync"),
        (eval_runner.EvalRun, "_trial", "trial", "coro"),
        (eval_runner.EvalRun, "_turn", "agent", "coro"),
        (eval_runner.EvalRun, "_from_check", "from_check", "sync"),
        (eval_runner.EvalRun, "_tidy", "discard", "sync"),
        (RaceAgents, "_check", "check", "stream"),
        (RaceAgents, "_run_check", "check_command", "coro"),
        (EvalRecord, "add", "record_write", "sync"),
    ]
    patches = [(owner, name, getattr(clock, kind)(part, getattr(owner, name))) for owner, name, part, kind in wanted]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, wrapped in patches:
            setattr(owner, name, wrapped)
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _evaluation(root: Path, repo: Path, tasks: int, samples: int) -> dict[str, Any]:
    root.mkdir()
    script = root / "script.json"
    script.write_text(json.dumps(_script()))
    dataset = tuple(
        Task(id=f"t{i}", repository=str(repo), prompt=f"answer t{i}", check='test "$(cat answer.txt)" = ok')
        for i in range(1, tasks + 1)
    )
    variant = Variant(label="scripted", provider="scripted", options={"script": str(script)})
    store_file = root / "store" / "s.db"
    store_file.parent.mkdir()
    record, plan = EvalRecord.create(
        root / "store" / "evals",
        {"dataset": "bench", "tasks": dataset, "variants": (variant,), "samples": samples},
    )

    def make_racer(v: Variant, tree: Any) -> Racer:
        provider = create_provider(v.provider, model=v.model, options=dict(v.options))
        return Racer(label=v.label, provider=provider, tree=tree, tools=workspace_tools(Workspace(tree.workspace)))

    clock = _Clock()
    store = open_store(str(store_file))
    try:
        evaluation = eval_runner.EvalRun(
            plan=plan, record=record, store=store, make_racer=make_racer, yes=True, progress=None
        )
        with _timed(clock):
            started = time.perf_counter()
            status = asyncio.run(evaluation.run())
            whole = time.perf_counter() - started
    finally:
        store.close()
    trials = record.trials()
    planned = len(plan.trial_keys())
    started = time.perf_counter()
    figures = report(plan, trials, status=status)
    figures_s = time.perf_counter() - started
    _check(status, trials, planned, figures, repo, clock)
    return {"clock": clock.spent, "whole_s": whole, "figures_s": figures_s, "trials": planned}


def _check(status: str, trials: list[Any], planned: int, figures: dict[str, Any], repo: Path, clock: _Clock) -> None:
    if status != "completed" or len(trials) != planned or not all(t.passed for t in trials):
        raise RuntimeError(f"the evaluation did not pass every trial: {status}, {sum(t.passed for t in trials)}")
    if figures["variants"][0]["passes"] != planned:
        raise RuntimeError("the figures do not count every pass")
    if any(len(clock.spent[name]) != planned for name in ("trial", "agent", "check", "record_write", "discard")):
        raise RuntimeError(f"a part was not timed once per trial: { {k: len(v) for k, v in clock.spent.items()} }")
    branches = subprocess.run(["git", "branch", "--list"], cwd=repo, capture_output=True, text=True, check=True)
    if branches.stdout.split() != ["*", "main"]:
        raise RuntimeError(f"branches were left: {branches.stdout!r}")


async def _plain_runs(folder: Path, store: Path, reps: int) -> list[float]:
    """The agent's floor: the same scripted turn by ``seamline.run`` in a plain folder."""
    took: list[float] = []
    for _ in range(reps + 1):  # the first warms imports and the store's schema
        started = time.perf_counter()
        done = await seamline.run("answer", provider=scripted(_script()), workspace=folder, store=store, yes=True)
        took.append(time.perf_counter() - started)
        if done.outcome != "completed" or (folder / "answer.txt").read_text() != "ok\n":
            raise RuntimeError(f"plain run did not write its file: {done.outcome}")
        (folder / "answer.txt").unlink()
    return took[1:]


def _bare_git(repo: Path, root: Path, reps: int) -> list[float]:
    """Bare git making and removing a worktree and its branch: the floor of create + discard."""
    took: list[float] = []
    for i in range(reps):
        where = root / f"bare-{i}"
        started = time.perf_counter()
        for args in (
            ["worktree", "add", "--quiet", "-b", f"bare-{i}", str(where), "HEAD"],
            ["worktree", "remove", "--force", str(where)],
            ["branch", "--quiet", "-D", f"bare-{i}"],
        ):
            subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
        took.append(time.perf_counter() - started)
    return took


def _ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def _measure(root: Path, files: int, tasks: int, samples: int) -> dict[str, Any]:
    repo = _repo(root, files)
    _evaluation(root / "warm", repo, 1, 1)  # warm-up: imports, the store's schema, git's caches
    ran = _evaluation(root / "eval", repo, tasks, samples)
    spent = ran["clock"]
    trial = spent["trial"]
    per_trial = [
        whole + write - agent for whole, write, agent in zip(trial, spent["record_write"], spent["agent"], strict=True)
    ]
    scoring = [a + b for a, b in zip(spent["from_check"], spent["keep_ref"], strict=True)]
    named = zip(spent["worktree_create"], spent["check"], scoring, spent["record_write"], spent["discard"], strict=True)
    other = [whole - sum(parts) for whole, parts in zip(per_trial, named, strict=True)]
    plain_folder = root / "plain"
    plain_folder.mkdir()
    plain = asyncio.run(_plain_runs(plain_folder, root / "plain.db", max(3, len(trial))))
    bare = _bare_git(repo, root, max(3, len(trial)))
    agent_ms = _ms(spent["agent"])
    overhead_ms = _ms(per_trial)
    parts = {f"{name}_ms": _ms(spent[name]) for name in PARTS if name not in ("agent", "scoring")}
    return {
        "repo_files": files,
        "trials": ran["trials"],
        "agent_ms": agent_ms,
        "plain_run_ms": _ms(plain),
        "overhead_ms": overhead_ms,
        "ratio": round(overhead_ms / agent_ms, 1) if agent_ms else None,
        **parts,
        "scoring_ms": _ms(scoring),
        "create_and_discard_ms": _ms([c + d for c, d in zip(spent["worktree_create"], spent["discard"], strict=True)]),
        "bare_git_add_remove_ms": _ms(bare),
        "other_ms": _ms(other),
        "trial_ms": _ms([t + w for t, w in zip(trial, spent["record_write"], strict=True)]),
        "eval_wall_ms_per_trial": round(ran["whole_s"] * 1000 / ran["trials"], 2),
        "figures_ms_per_trial": round(ran["figures_s"] * 1000 / ran["trials"], 3),
    }


def run(*, quick: bool = False) -> dict[str, Any]:
    """Medians per trial over ``tasks`` x ``samples`` trials (``--quick``: 2 x 1, 20 files)."""
    files, tasks, samples = (20, 2, 1) if quick else (FILES, 6, 3)
    with tempfile.TemporaryDirectory(prefix="seamline-bench-eval-") as tmp:
        result = _measure(Path(tmp), files, tasks, samples)
    result["samples"] = samples
    return result
