"""Worktree runs: what ``--worktree`` adds to a run, against the same run without it.

The same one-turn scripted run (one ``write_file`` call, then an answer, SQLite store on)
is made plainly in a folder and with ``worktree=True`` in a repository of 200 small
files; the worktree side then discards its worktree and branch, so each run pays the
whole life of a worktree: ``git worktree add``, the turn's commit, the removal. Also
timed alone: making a worktree, a turn's commit (one file changed), a turn that changed
nothing (no commit), and removing the worktree and its branch, beside the floor: bare
``git worktree add`` + ``git worktree remove`` + ``git branch -D`` of the same repository.
Every run checks its result: the file written, one commit on the run's branch.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import seamline
from seamline import worktrees
from seamline.testing import scripted

FILES = 200


def _script() -> list[dict[str, Any]]:
    call = {"name": "write_file", "arguments": {"path": "notes.txt", "content": "written\n"}}
    return [{"tool_calls": [call]}, {"text": "done"}]


def _repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    for i in range(FILES):
        (repo / "src" / f"f{i:03}.py").write_text(f"value = {i}\n" * 20)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    who = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    for args in (["init", "--quiet", "--initial-branch=main"], ["add", "."], ["commit", "--quiet", "-m", "init"]):
        subprocess.run(["git", *who, *args], cwd=repo, env=env, check=True, capture_output=True)
    return repo


def _ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


async def _plain(folder: Path, store: Path) -> float:
    started = time.perf_counter()
    done = await seamline.run("write", provider=scripted(_script()), workspace=folder, store=store, yes=True)
    took = time.perf_counter() - started
    if done.outcome != "completed" or (folder / "notes.txt").read_text() != "written\n":
        raise RuntimeError(f"plain run did not write its file: {done.outcome}")
    (folder / "notes.txt").unlink()
    return took


async def _with_worktree(repo: Path, store: Path) -> float:
    started = time.perf_counter()
    done = await seamline.run(
        "write", provider=scripted(_script()), workspace=repo, store=store, yes=True, worktree=True
    )
    worktrees.discard(done.session_id, store=store)
    took = time.perf_counter() - started
    if done.outcome != "completed":
        raise RuntimeError(f"worktree run ended {done.outcome}")
    return took


def _bare_git(repo: Path, root: Path, reps: int) -> float:
    """Bare git making and removing a worktree and its branch: the floor of create + remove."""
    samples: list[float] = []
    for i in range(reps):
        where = root / f"bare-{i}"
        started = time.perf_counter()
        for args in (
            ["worktree", "add", "--quiet", "-b", f"bare-{i}", str(where), "HEAD"],
            ["worktree", "remove", "--force", str(where)],
            ["branch", "--quiet", "-D", f"bare-{i}"],
        ):
            subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return _ms(samples)


def _parts(repo: Path, store: Path, reps: int) -> dict[str, float]:
    made: list[float] = []
    committed: list[float] = []
    unchanged: list[float] = []
    removed: list[float] = []
    for _ in range(reps):
        started = time.perf_counter()
        tree = worktrees.create(repo, run_id=uuid.uuid4().hex, store=store)
        made.append(time.perf_counter() - started)
        (Path(tree.workspace) / "notes.txt").write_text("written\n")
        started = time.perf_counter()
        commit = worktrees.commit_turn(tree, turn=1)
        committed.append(time.perf_counter() - started)
        started = time.perf_counter()
        again = worktrees.commit_turn(tree, turn=2)
        unchanged.append(time.perf_counter() - started)
        if commit is None or again is not None:
            raise RuntimeError("a changed turn must make one commit and an unchanged one none")
        started = time.perf_counter()
        worktrees.abandon(tree)
        removed.append(time.perf_counter() - started)
    return {
        "create_ms": _ms(made),
        "commit_turn_ms": _ms(committed),
        "unchanged_turn_ms": _ms(unchanged),
        "remove_ms": _ms(removed),
    }


async def _measure(root: Path, reps: int) -> dict[str, Any]:
    repo = _repo(root)
    plain_folder = root / "plain"
    plain_folder.mkdir()
    store = root / "store.db"
    await _plain(plain_folder, store)  # warm-up: imports, the store's schema
    plain: list[float] = []
    boxed: list[float] = []
    for _ in range(reps):
        plain.append(await _plain(plain_folder, store))
        boxed.append(await _with_worktree(repo, store))
    p, w = _ms(plain), _ms(boxed)
    return {
        "repo_files": FILES,
        "plain_run_ms": p,
        "worktree_run_ms": w,
        "added_ms": round(w - p, 2),
        "ratio": round(w / p, 1) if p else None,
        **_parts(repo, store, reps),
        "bare_git_add_remove_ms": _bare_git(repo, root, reps),
    }


def run(*, quick: bool = False) -> dict[str, Any]:
    """Median wall times over ``reps`` runs each way; ``added_ms`` is what a worktree adds."""
    reps = 3 if quick else 15
    with tempfile.TemporaryDirectory(prefix="seamline-bench-worktree-") as tmp:
        result = asyncio.run(_measure(Path(tmp), reps))
    result["reps"] = reps
    return result
