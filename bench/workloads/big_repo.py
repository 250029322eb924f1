"""Big repositories (issue 44): what the edit journal adds to an agent CLI's turn, and
what ``--worktree`` costs, on a repository of 100,000 files and 3 GB.

The repository is built under the system's temporary folder and removed afterwards:
``files`` files of ``total_bytes`` in all, in folders of 100; ``ignored_share`` of them
under ``.venv/`` (ignored by ``.gitignore``, as a virtual environment is), the rest
committed. Measured in the same run, each beside its floor:

- ``git status`` on it (the bare command, warm): the floor of the first turn;
- the journal's first turn (a fresh journal, as for a new session): the scan before the
  turn (the prompt waits for it) and the scan after it, through ``EditJournal.track`` as
  ``journaled_turn`` calls it (whole tree, ``.git`` left out), the turn itself empty;
  and what it read and copied (goal: nothing of the tracked files);
- a later turn: the same again with the same journal (its scans drain the inotify watch
  the first scan set up: checked, no walk); the same later turn with the watch switched
  off (``SEAMLINE_JOURNAL_WATCH=0``: both scans walk and stat the tree, as before); and a
  turn that edits one tracked file and writes one ``.pyc`` under ``.venv/`` (checked: one
  path reported, the ``.pyc`` journaled as ignored, the revert puts the file back);
- ``seamline.worktrees.create`` on it (what ``seamline run --worktree`` does before the
  first turn) against bare ``git worktree add`` of the same commit.

Figures are medians of ``reps``; full run: 100,000 files / 3 GB; ``--quick``: 2,000 files
/ 20 MB, so CI keeps it working.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from seamline import worktrees
from seamline.sandbox.journal import EditJournal
from seamline.sandbox.tree_watch import ENV_SWITCH

FULL = {"files": 100_000, "total_bytes": 3_000_000_000, "ignored_share": 0.2}
QUICK = {"files": 2_000, "total_bytes": 20_000_000, "ignored_share": 0.2}
_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
_WHO = ["-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "core.looseCompression=1"]
_SKIP = frozenset({".git"})


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *_WHO, *args], cwd=repo, env=_ENV, check=True, capture_output=True, text=True)
    return done.stdout


def build(root: Path, *, files: int, total_bytes: int, ignored_share: float) -> Path:
    """A committed repository of ``files`` files and about ``total_bytes``."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    size = max(total_bytes // files, 16)
    ignored = int(files * ignored_share)
    filler = bytes(range(256)) * (size // 256 + 1)
    for k in range(files):
        folder = repo / (".venv/lib" if k < ignored else "src") / f"d{k // 100:04}"
        if k % 100 == 0:
            folder.mkdir(parents=True)
        header = f"# file {k}\n".encode()
        (folder / f"m{k:06}.py").write_bytes(header + filler[: size - len(header)])
    (repo / ".gitignore").write_text(".venv/\n__pycache__/\n*.pyc\n")
    _git(repo, "init", "--quiet", "--initial-branch=main")
    _git(repo, "add", ".")
    _git(repo, "commit", "--quiet", "-m", "big")
    return repo


def _median(samples: list[float]) -> float:
    return round(statistics.median(samples), 3)


def _git_status(repo: Path, reps: int) -> float:
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        subprocess.run(["git", "status", "--porcelain"], cwd=repo, env=_ENV, check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return _median(samples)


def _turn(journal: EditJournal, repo: Path, run_id: str, act: Any = None) -> tuple[float, float]:
    """One journaled turn: seconds before the turn starts (the scan before it) and after
    it ends (the scan after, the step recorded)."""
    started = time.perf_counter()
    with journal.track(
        run_id=run_id, workspace=repo, tool="bench", call_id="turn", skip_dirs=_SKIP, number_at_end=True
    ):
        before = time.perf_counter() - started
        if act is not None:
            act()
        ended = time.perf_counter()
    return before, time.perf_counter() - ended


def _walked_later_turn(repo: Path, db: Path) -> float:
    """A later turn with the watch switched off: both scans walk and stat the whole tree."""
    os.environ[ENV_SWITCH] = "0"
    journal = EditJournal(db)
    try:
        _turn(journal, repo, "walked")
        b, a = _turn(journal, repo, "walked")
        if journal.index.drains:
            raise RuntimeError("a scan drained a watch with the watch switched off")
        return b + a
    finally:
        del os.environ[ENV_SWITCH]
        journal.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)


def _journal_figures(repo: Path, root: Path, reps: int) -> dict[str, Any]:
    first_before: list[float] = []
    first_after: list[float] = []
    later_before: list[float] = []
    later_after: list[float] = []
    walked: list[float] = []
    read_files = read_bytes = blobs = 0
    for i in range(reps):
        journal = EditJournal(root / f"store-{i}.edits.db")  # a new journal: the first turn ever
        try:
            b, a = _turn(journal, repo, "first")
            first_before.append(b)
            first_after.append(a)
            read_files, read_bytes = journal.index.hashed_files, journal.index.hashed_bytes
            blobs = journal._db.execute("SELECT COUNT(*) FROM blobs").fetchone()[0]
            b, a = _turn(journal, repo, "later")
            later_before.append(b)
            later_after.append(a)
            if (journal.index.walks, journal.index.drains) != (1, 3):
                raise RuntimeError(f"the later turn walked: {journal.index.walks} walks, {journal.index.drains} drains")
            walked.append(_walked_later_turn(repo, root / f"walked-{i}.edits.db"))
        finally:
            journal.close()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{root / f'store-{i}.edits.db'}{suffix}").unlink(missing_ok=True)
    return {
        "first_turn_before_s": _median(first_before),
        "first_turn_after_s": _median(first_after),
        "first_turn_added_s": _median([b + a for b, a in zip(first_before, first_after, strict=True)]),
        "first_turn_read_files": read_files,
        "first_turn_read_bytes": read_bytes,
        "first_turn_blobs_kept": blobs,
        "later_turn_added_ms": round(
            statistics.median([b + a for b, a in zip(later_before, later_after, strict=True)]) * 1000, 2
        ),
        "later_turn_walked_s": _median(walked),
    }


def _edit_turn(repo: Path, root: Path) -> dict[str, Any]:
    """A turn that edits one tracked file and leaves a .pyc in the ignored .venv: checked."""
    target = next((repo / "src").rglob("*.py"))
    old = target.read_bytes()
    pyc = repo / ".venv" / "lib" / "cache.cpython-311.pyc"
    journal = EditJournal(root / "edit.edits.db")
    try:
        _turn(journal, repo, "edit")

        def act() -> None:
            target.write_bytes(b"edited by the agent\n")
            pyc.write_bytes(b"\0bytecode")

        before, after = _turn(journal, repo, "edit", act)
        steps = journal.steps("edit")
        step = steps[-1]
        rel = target.relative_to(repo).as_posix()
        if step.paths != (rel,) or step.ignored != (".venv/lib/cache.cpython-311.pyc",):
            raise RuntimeError(f"the edit turn journaled {step.paths} / {step.ignored}")
        journal.revert("edit", to_step=steps[0].step)
        if target.read_bytes() != old or pyc.exists():
            raise RuntimeError("the revert did not put the tracked file back or remove the .pyc")
        return {"edit_turn_added_ms": round((before + after) * 1000, 1)}
    finally:
        journal.close()


def _worktree_figures(repo: Path, root: Path, reps: int) -> dict[str, Any]:
    made: list[float] = []
    bare: list[float] = []
    store = root / "wt-store.db"
    for i in range(reps):
        started = time.perf_counter()
        tree = worktrees.create(repo, run_id=uuid.uuid4().hex, store=store)
        made.append(time.perf_counter() - started)
        worktrees.abandon(tree)
        where = root / f"bare-{i}"
        started = time.perf_counter()
        _git(repo, "worktree", "add", "--quiet", "-b", f"bare-{i}", str(where), "HEAD")
        bare.append(time.perf_counter() - started)
        _git(repo, "worktree", "remove", "--force", str(where))
        _git(repo, "branch", "--quiet", "-D", f"bare-{i}")
    return {"worktree_create_s": _median(made), "bare_git_worktree_add_s": _median(bare)}


def run(*, quick: bool = False, size: dict[str, Any] | None = None, worktree_reps: int | None = None) -> dict[str, Any]:
    """``worktree_reps``: how many worktrees to make (default: as many as ``reps``); on a
    shared disk each full-size checkout takes a minute or more."""
    shape = size or (QUICK if quick else FULL)
    reps = 1 if quick else 3
    root = Path(tempfile.mkdtemp(prefix="seamline-bench-bigrepo-"))
    try:
        started = time.perf_counter()
        repo = build(root, **shape)
        built = time.perf_counter() - started
        _git_status(repo, 1)  # warm: the floor and the journal both meet a warm page cache
        result: dict[str, Any] = {**shape, "build_s": round(built, 1), "reps": reps}
        result["git_status_s"] = _git_status(repo, reps)
        result |= _journal_figures(repo, root, reps)
        result |= _edit_turn(repo, root)
        result |= _worktree_figures(repo, root, worktree_reps or reps)
        result["worktree_reps"] = worktree_reps or reps
        floor = result["git_status_s"]
        result["first_turn_vs_git_status"] = round(result["first_turn_added_s"] / floor, 2) if floor else None
        result["later_turn_vs_git_status"] = round(result["later_turn_added_ms"] / 1000 / floor, 3) if floor else None
        result["later_turn_walked_vs_git_status"] = round(result["later_turn_walked_s"] / floor, 2) if floor else None
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)
