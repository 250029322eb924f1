"""Worktree runs through the Python API, on real git in temporary repositories: where the
worktree goes, what the session records, one commit per turn that changed something, who
commits, and the refusals that change nothing."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

import seamline
from seamline import worktrees
from seamline.errors import InvalidRequest, WorktreeFailure, WorktreeRefused
from seamline.events import Complete, Error
from seamline.runner import open_session
from seamline.sessions import open_store
from seamline.stages.builder import AgentProfile
from seamline.testing import scripted
from tests.worktrees.git_repo import IDENTITY, git, git_home, make_repo, snapshot


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in git_home(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    for key in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(key, raising=False)
    return make_repo(tmp_path / "repo")


def _write(path: str, content: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}


def _subjects(repo: Path, ref: str) -> list[str]:
    return git(repo, "log", "--topo-order", "--format=%s", ref).splitlines()


def test_each_turn_that_changed_something_is_one_commit_on_the_runs_branch(repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    script = [_write("a.txt", "A\n"), {"text": "one"}, {"text": "two"}, _write("b.txt", "B\n"), {"text": "three"}]
    agent = seamline.Agent(provider=scripted(script), workspace=repo, worktree=True, store=store, yes=True)
    before = snapshot(repo)

    async def three_turns() -> str:
        async with agent.session() as session:
            for prompt in ("write a", "say two", "write b"):
                assert (await session.run(prompt)).outcome == "completed"
            return session.session_id

    run_id = asyncio.run(three_turns())
    branch = f"seamline/{run_id[:8]}"
    # Turn 2 changed nothing: no commit. The main working tree is as it was.
    assert _subjects(repo, branch) == [f"seamline run {run_id} turn 3", f"seamline run {run_id} turn 1", "init"]
    assert snapshot(repo)[:2] == before[:2] and not (repo / "a.txt").exists()
    tree_path = tmp_path / "worktrees" / run_id  # beside the store, never inside the repository
    assert (tree_path / "a.txt").read_text() == "A\n" and (tree_path / "b.txt").read_text() == "B\n"
    opened = open_store(store)
    record = opened.require(run_id)
    opened.close()
    kept = record.run_options["worktree"]
    assert kept["repo"] == str(repo.resolve()) and kept["base"] == before[0] and kept["branch"] == branch
    assert kept["base_branch"] == "main" and kept["state"] == "open" and record.workspace == str(tree_path)
    shown = worktrees.diff(run_id[:8], store=store, stat=True)
    assert "a.txt" in shown and "b.txt" in shown and "2 files changed" in shown
    assert "+B" in worktrees.diff(run_id, store=store)


def test_commits_are_seamlines_without_a_git_identity_and_the_users_with_one(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store.db"
    mine = seamline.run_sync(
        "go", provider=scripted([_write("a.txt", "A"), {"text": "ok"}]), workspace=repo, store=store,
        worktree=True, yes=True,
    )  # fmt: skip
    assert git(repo, "log", "-1", "--format=%an <%ae>", f"seamline/{mine.session_id[:8]}") == (
        f"{IDENTITY[0]} <{IDENTITY[1]}>"
    )
    for key, value in git_home(tmp_path / "bare-home", identity=False).items():
        monkeypatch.setenv(key, value)
    theirs = seamline.run_sync(
        "go", provider=scripted([_write("b.txt", "B"), {"text": "ok"}]), workspace=repo, store=store,
        worktree=True, yes=True,
    )  # fmt: skip
    branch = f"seamline/{theirs.session_id[:8]}"
    assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", branch) == (
        "seamline <seamline@localhost>|seamline <seamline@localhost>"
    )


def test_run_options_name_the_branch_and_refuse_what_cannot_work(repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    done = seamline.run_sync(
        "go", provider=scripted([_write("n.txt", "N"), {"text": "ok"}]), workspace=repo, store=store,
        worktree=True, branch="feature/notes", yes=True,
    )  # fmt: skip
    assert _subjects(repo, "feature/notes")[0] == f"seamline run {done.session_id} turn 1"
    refused = [
        {"worktree": True, "store": None},
        {"worktree": True, "tools": seamline.Toolset()},
        {"branch": "x"},
    ]
    for options in refused:
        with pytest.raises(InvalidRequest):
            seamline.run_sync("go", provider=scripted([{"text": "ok"}]), workspace=repo, **{"store": store, **options})

    async def resume_with_a_worktree() -> None:
        async with open_session(provider=scripted([]), store=store, resume=done.session_id, worktree=True):
            pass

    with pytest.raises(InvalidRequest, match="drop worktree="):
        asyncio.run(resume_with_a_worktree())
    with pytest.raises(InvalidRequest, match="needs a store"):
        seamline.Agent(provider=scripted([]), workspace=repo, worktree=True, store=None)


def test_where_a_worktree_cannot_be_made_nothing_is_made(repo: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(WorktreeRefused, match="needs a git repository"):
        worktrees.create(plain, run_id="a" * 32, store=tmp_path / "s.db")
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "--quiet")
    with pytest.raises(WorktreeRefused, match="no commit yet"):
        worktrees.create(empty, run_id="a" * 32, store=tmp_path / "s.db")
    git(repo, "branch", "taken")
    before = snapshot(repo)
    with pytest.raises(WorktreeRefused, match="exists already"):
        worktrees.create(repo, run_id="a" * 32, store=tmp_path / "s.db", branch="taken")
    with pytest.raises(WorktreeRefused, match="not a usable branch name"):
        worktrees.create(repo, run_id="a" * 32, store=tmp_path / "s.db", branch="two..dots")
    assert snapshot(repo) == before and not (tmp_path / "worktrees").exists()


def test_git_missing_is_a_classified_failure(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs"))
    with pytest.raises(WorktreeFailure, match="git is not installed"):
        worktrees.create(repo, run_id="a" * 32, store=tmp_path / "s.db")


def test_a_session_that_never_opens_leaves_no_worktree_or_branch(repo: Path, tmp_path: Path) -> None:
    before = snapshot(repo)
    with pytest.raises(seamline.SeamlineError):
        seamline.run_sync(
            "go", provider=scripted([{"text": "ok"}]), workspace=repo, store=tmp_path / "s.db", worktree=True,
            profile=AgentProfile(required_modules=("no-such-module",)),
        )  # fmt: skip
    assert snapshot(repo) == before
    assert len(git(repo, "worktree", "list", "--porcelain").split("\n\n")) == 1
    assert list((tmp_path / "worktrees").iterdir()) == []


def test_a_failed_commit_fails_the_turn_with_a_classified_error(repo: Path, tmp_path: Path) -> None:
    async def two_turns() -> list[Any]:
        async with open_session(
            provider=scripted([_write("a.txt", "A"), {"text": "one"}, {"text": "two"}]), workspace=repo,
            store=tmp_path / "s.db", worktree=True, yes=True,
        ) as session:  # fmt: skip
            [e async for e in session.send("one")]
            shutil.rmtree(tmp_path / "worktrees" / session.session_id)  # the worktree vanished between turns
            return [e async for e in session.send("two")]

    events = asyncio.run(two_turns())
    errors = [e for e in events if isinstance(e, Error)]
    assert errors and errors[0].kind == "storage" and "worktree" in errors[0].message
    assert isinstance(events[-1], Complete) and events[-1].outcome == "failed"
    assert [e for e in events if isinstance(e, Complete)] == [events[-1]]  # still one complete


def test_no_hook_of_the_repository_runs_and_a_rewritten_git_file_is_not_followed(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    hooks = repo / ".git" / "hooks"
    for name in ("pre-commit", "post-commit", "commit-msg", "post-checkout", "pre-merge-commit", "post-merge"):
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> {marker}\n")
        (hooks / name).chmod(0o755)
    store = tmp_path / "store.db"
    script = [_write("a.txt", "A"), {"text": "one"}, _write("b.txt", "B"), {"text": "two"}]

    async def run() -> str:
        async with open_session(
            provider=scripted(script), workspace=repo, store=store, worktree=True, yes=True
        ) as session:
            [e async for e in session.send("one")]
            # The agent points the worktree's .git file at a repository of its own.
            elsewhere = tmp_path / "elsewhere"
            git(tmp_path, "init", "--quiet", "--bare", str(elsewhere))
            (tmp_path / "worktrees" / session.session_id / ".git").write_text(f"gitdir: {elsewhere}\n")
            [e async for e in session.send("two")]
            return session.session_id

    run_id = asyncio.run(run())
    assert _subjects(repo, f"seamline/{run_id[:8]}")[:2] == [
        f"seamline run {run_id} turn 2",
        f"seamline run {run_id} turn 1",
    ]
    assert worktrees.merge(run_id, store=store).commits == 2
    assert not marker.exists()


def test_a_workspace_inside_the_repository_is_the_same_folder_in_the_worktree(repo: Path, tmp_path: Path) -> None:
    (repo / "sub").mkdir()
    (repo / "sub" / "keep").write_text("k\n")
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "sub")
    done = seamline.run_sync(
        "go", provider=scripted([_write("x.txt", "X"), {"text": "ok"}]), workspace=repo / "sub",
        store=tmp_path / "s.db", worktree=True, yes=True,
    )  # fmt: skip
    assert "sub/x.txt" in worktrees.diff(done.session_id, store=tmp_path / "s.db", stat=True)


def test_a_store_inside_the_repository_puts_worktrees_in_the_data_folder(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    tree = worktrees.create(repo, run_id="b" * 32, store=repo / ".seamline" / "store.db")
    assert Path(tree.path) == tmp_path / "data" / "seamline" / "worktrees" / ("b" * 32)
    worktrees.abandon(tree)
    assert not Path(tree.path).exists() and "seamline/bbbbbbbb" not in snapshot(repo)[2]


def test_a_resumed_run_works_and_commits_in_its_worktree(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store.db"
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the default workspace, "."
    first = seamline.run_sync(
        "one", provider=scripted([_write("a.txt", "A"), {"text": "ok"}]), workspace=repo, store=store,
        worktree=True, yes=True,
    )  # fmt: skip

    async def again() -> None:
        # No workspace given: the run goes on in its worktree, not in the current folder.
        async with open_session(
            provider=scripted([_write("b.txt", "B"), {"text": "ok"}]), store=store, resume=first.session_id, yes=True
        ) as session:
            [e async for e in session.send("two")]

    asyncio.run(again())
    assert _subjects(repo, f"seamline/{first.session_id[:8]}")[0] == f"seamline run {first.session_id} turn 2"
    assert (tmp_path / "worktrees" / first.session_id / "b.txt").read_text() == "B"
    assert list(elsewhere.iterdir()) == []

    async def fork() -> None:
        async with open_session(provider=scripted([]), store=store, fork=first.session_id):
            pass

    with pytest.raises(WorktreeRefused, match="forking"):
        asyncio.run(fork())
