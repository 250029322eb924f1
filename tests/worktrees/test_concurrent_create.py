"""Worktrees made at once of one repository: git's ``worktree add`` is not safe to run
concurrently on one repository (one of them may fail reading another's half-made
``.git/worktrees/NAME``), so :func:`seamline.worktrees.create` takes a lock of the
repository's own, across threads and processes."""

from __future__ import annotations

import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from seamline.worktrees import Worktree, create
from tests.worktrees.git_repo import git, git_home, make_repo

_MANY = 12


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in git_home(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    return make_repo(tmp_path / "repo")


def test_many_worktrees_made_at_once_in_threads_all_succeed(repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    ids = [uuid.uuid4().hex for _ in range(_MANY)]
    with ThreadPoolExecutor(max_workers=_MANY) as pool:
        made: list[Worktree] = list(pool.map(lambda run_id: create(repo, run_id=run_id, store=store), ids))
    assert sorted(t.run_id for t in made) == sorted(ids)
    listed = git(repo, "worktree", "list", "--porcelain")
    assert all(t.path in listed for t in made) and all(Path(t.path, "README").is_file() for t in made)


def test_many_worktrees_made_at_once_by_processes_all_succeed(repo: Path, tmp_path: Path) -> None:
    program = (
        "import sys, uuid; from seamline.worktrees import create; "
        "print(create(sys.argv[1], run_id=uuid.uuid4().hex, store=sys.argv[2]).path)"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", program, str(repo), str(tmp_path / "store.db")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(_MANY)
    ]
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:  # pragma: no cover - only on a hang
                proc.kill()
                proc.wait()
        results.append((proc.returncode, out.strip(), err.strip()))
    assert [code for code, _, _ in results] == [0] * _MANY, [err for _, _, err in results if err]
    listed = git(repo, "worktree", "list", "--porcelain")
    assert all(path in listed for _, path, _ in results)
