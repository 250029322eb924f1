"""Worktrees made at once of one repository: git's ``worktree add`` is not safe to run
concurrently on one repository (one of them may fail reading another's half-made
``.git/worktrees/NAME``), so :func:`seamline.worktrees.create` takes a lock of the
repository's own, across threads and processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from seamline.worktrees import Worktree, create
from tests.worktrees.git_repo import git, git_home, make_repo

_MANY = 12


# A `git` ahead of the real one on PATH that notes when two `worktree add` overlap: each
# takes a folder on entry (mkdir is atomic) and holds it a moment; one that finds it taken
# writes `overlap`. git itself often survives an overlap, so the lock is checked directly.
_SHIM = """#!/bin/sh
case " $* " in
*" worktree add "*)
    if mkdir "$SHIM_STATE/inside" 2>/dev/null; then mine=1; else : >"$SHIM_STATE/overlap"; mine=0; fi
    sleep 0.1
    "$REAL_GIT" "$@"
    code=$?
    if [ "$mine" = 1 ]; then rmdir "$SHIM_STATE/inside"; fi
    exit "$code"
    ;;
esac
exec "$REAL_GIT" "$@"
"""


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in git_home(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    made = make_repo(tmp_path / "repo")
    real = shutil.which("git")
    assert real is not None
    shim, state = tmp_path / "shim", tmp_path / "shim-state"
    shim.mkdir()
    state.mkdir()
    (shim / "git").write_text(_SHIM)
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("REAL_GIT", real)
    monkeypatch.setenv("SHIM_STATE", str(state))
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    return made


def assert_one_at_a_time(tmp_path: Path) -> None:
    state = tmp_path / "shim-state"
    assert not (state / "overlap").exists(), "two `git worktree add` ran at once"
    assert not (state / "inside").exists()


def test_many_worktrees_made_at_once_in_threads_all_succeed(repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    ids = [uuid.uuid4().hex for _ in range(_MANY)]
    with ThreadPoolExecutor(max_workers=_MANY) as pool:
        made: list[Worktree] = list(pool.map(lambda run_id: create(repo, run_id=run_id, store=store), ids))
    assert sorted(t.run_id for t in made) == sorted(ids)
    listed = git(repo, "worktree", "list", "--porcelain")
    assert all(t.path in listed for t in made) and all(Path(t.path, "README").is_file() for t in made)
    assert_one_at_a_time(tmp_path)


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
    assert_one_at_a_time(tmp_path)
