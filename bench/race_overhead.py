"""What a race costs beside the runs it races: a 3-way ``seamline race`` of scripted
racers against the same three scripted runs started at once with ``worktree=True``.

    .venv/bin/python bench/race_overhead.py [--reps 5] [--steps 1]

Both sides do the same agent work in a temporary repository with a SQLite store: three
runs, each in its own new worktree (made one after the other), each writing one file with ``write_file`` over
``--steps`` tool calls (a commit per turn), all at once. The race adds what makes it a
race: the controller and its hash-chained trace file, a check per run (``true``: one
``/bin/sh`` each), the diff figures per run, and the ranking. The worktrees are removed
between repetitions, outside the timing. Prints one JSON object: the median wall time of
each side, the difference per race and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import seamline  # noqa: E402
from seamline import worktrees  # noqa: E402
from seamline.live.race import Racer, open_race  # noqa: E402
from seamline.pipeline import stream_pipeline  # noqa: E402
from seamline.sessions.portable_store import SessionStore  # noqa: E402
from seamline.sessions.sqlite_store import open_store  # noqa: E402
from seamline.testing import scripted  # noqa: E402
from seamline.tools.workspace import Workspace, workspace_tools  # noqa: E402

RACERS = 3


def _script(name: str, steps: int) -> list[dict[str, Any]]:
    calls = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": f"{name}.txt", "content": f"{name} {n}\n"}}]}
        for n in range(steps)
    ]
    return [*calls, {"text": f"wrote {name}.txt"}]


def _repo(folder: Path) -> Path:
    repo = folder / "repo"
    repo.mkdir()
    who = ["-c", "user.name=Bench", "-c", "user.email=bench@example.com"]
    for args in (["init", "--quiet", "--initial-branch=main"], ["add", "."], ["commit", "--quiet", "-m", "init"]):
        if args[0] == "add":
            (repo / "README").write_text("bench\n")
        subprocess.run(["git", *who, *args], cwd=repo, check=True, capture_output=True)
    return repo


async def _trees(repo: Path, store: SessionStore) -> list[worktrees.Worktree]:
    # One after the other, as `seamline race` makes them: git's `worktree add` run
    # concurrently on one repository can trip over another's half-made worktree.
    return [
        await asyncio.to_thread(worktrees.create, repo, run_id=uuid.uuid4().hex, store=store.location)
        for _ in range(RACERS)
    ]


async def _plain(repo: Path, store: SessionStore, steps: int) -> list[str]:
    runs = [
        seamline.run(
            "write",
            provider=scripted(_script(f"p{n}", steps)),
            workspace=tree.workspace,
            tools=workspace_tools(Workspace(tree.workspace)),
            store=store,
            worktree=tree,
            yes=True,
        )
        for n, tree in enumerate(await _trees(repo, store))
    ]
    return [result.session_id for result in await asyncio.gather(*runs)]


async def _race(repo: Path, store: SessionStore, folder: Path, steps: int) -> list[str]:
    racers = [
        Racer(
            label="scripted",
            provider=scripted(_script(f"r{n}", steps)),
            tree=tree,
            tools=workspace_tools(Workspace(tree.workspace)),
        )
        for n, tree in enumerate(await _trees(repo, store))
    ]
    trace = folder / f"{uuid.uuid4().hex}.jsonl"
    controller, agents = open_race(racers, store=store, check="true", yes=True, trace_file=trace)
    async for _ in stream_pipeline(controller, "write"):
        pass
    assert controller.report.outcome == "completed", controller.report.detail
    return [racer.tree.run_id for racer in agents.racers.values()]


def _measure(reps: int, steps: int) -> dict[str, Any]:
    plain: list[float] = []
    raced: list[float] = []
    with tempfile.TemporaryDirectory(prefix="seamline-race-bench-") as tmp:
        folder = Path(tmp)
        os.environ.update({"HOME": str(folder), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull})
        repo = _repo(folder)
        store = open_store(folder / "store.db")
        try:
            for rep in range(reps + 1):  # the first of each is a warm-up
                for side, times in (("plain", plain), ("race", raced)):
                    started = time.perf_counter()
                    if side == "plain":
                        runs = asyncio.run(_plain(repo, store, steps))
                    else:
                        runs = asyncio.run(_race(repo, store, folder, steps))
                    elapsed = time.perf_counter() - started
                    if rep:
                        times.append(elapsed)
                    for run in runs:  # outside the timing: the next repetition starts clean
                        worktrees.discard(run, store=store)
        finally:
            store.close()
    p, r = statistics.median(plain), statistics.median(raced)
    return {
        "racers": RACERS,
        "steps": steps,
        "reps": reps,
        "plain_worktree_runs_ms": round(p * 1000, 1),
        "race_ms": round(r * 1000, 1),
        "race_overhead_ms": round((r - p) * 1000, 1),
        "ratio": round(r / p, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(_measure(args.reps, args.steps)))


if __name__ == "__main__":
    main()
