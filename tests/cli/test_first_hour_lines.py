"""Lines a new user met in the first hour that said too little or said it wrong: a session
id prefix shorter than four characters, a `seamline diff` of a run that changed nothing,
and "1 commits squashed"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.worktrees.git_repo import git, git_home, make_repo, worktree_run


def _seamline(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "seamline", *argv], capture_output=True, text=True, timeout=120)


def test_a_prefix_too_short_says_how_long_it_must_be(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    made = _seamline("run", "--json", "--store", str(store), "--workspace", "docs", "What does the store keep?")
    assert made.returncode == 0, made.stderr
    session_id = made.stdout.split('"session_id":"', 1)[1][:32]
    shown = _seamline("sessions", "show", session_id[:2], "--store", str(store))
    assert shown.returncode == 2
    assert "at least 4 characters" in shown.stderr, shown.stderr
    assert _seamline("sessions", "show", session_id[:4], "--store", str(store)).returncode == 0


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in git_home(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    return make_repo(tmp_path / "repo")


def test_the_diff_of_a_run_that_changed_nothing_says_so(repo: Path, tmp_path: Path) -> None:
    import asyncio

    import seamline
    from seamline.testing import scripted

    store = tmp_path / "store.db"
    agent = seamline.Agent(provider=scripted([{"text": "nothing to do"}]), workspace=repo, worktree=True, store=store)

    async def turn() -> str:
        async with agent.session() as session:
            await session.run("look only")
            return session.session_id

    run_id = asyncio.run(turn())
    shown = _seamline("diff", run_id[:12], "--store", str(store))
    assert shown.returncode == 0 and shown.stdout == ""
    assert "changed nothing" in shown.stderr, shown.stderr


def test_a_squashed_merge_of_one_commit_says_one_commit(repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    run_id = worktree_run(repo, store, "notes.txt", "from the run\n")
    merged = _seamline("merge", run_id[:12], "--squash", "--store", str(store))
    assert merged.returncode == 0, merged.stderr
    subject = git(repo, "log", "-1", "--format=%s")
    assert subject.endswith(", 1 commit squashed"), subject


def test_a_worktree_run_says_it_starts_without_the_main_trees_uncommitted_changes(repo: Path, tmp_path: Path) -> None:
    import json

    tracked = next(p for p in repo.iterdir() if p.is_file())
    tracked.write_text(tracked.read_text() + "an uncommitted line\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "ok"}]))
    done = _seamline(
        "run", "--worktree", "--store", str(tmp_path / "store.db"), "-w", str(repo), "-p", "scripted",
        "-o", f"script={script}", "look",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "1 uncommitted change(s); the worktree starts from HEAD" in done.stderr, done.stderr
    clean = make_repo(tmp_path / "clean")
    quiet = _seamline(
        "run", "--worktree", "--store", str(tmp_path / "store.db"), "-w", str(clean), "-p", "scripted",
        "-o", f"script={script}", "look",
    )  # fmt: skip
    assert quiet.returncode == 0 and "uncommitted" not in quiet.stderr, quiet.stderr
