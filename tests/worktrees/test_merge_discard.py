"""After a worktree run: merge (plain and squashed) into the branch it started from, the
refusals that leave the main working tree exactly as it was, and discard."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

import seamline
from seamline import worktrees
from seamline.errors import WorktreeRefused
from seamline.sessions import open_store
from seamline.testing import scripted
from seamline.worktrees.runs import _restore
from tests.worktrees.git_repo import git, git_home, make_repo, snapshot


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in git_home(tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    return make_repo(tmp_path / "repo")


def _run(repo: Path, store: Path, *writes: tuple[str, str]) -> str:
    """One worktree run, a turn per write; its id."""
    script: list[dict[str, Any]] = []
    for path, content in writes:
        script += [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]},
            {"text": "ok"},
        ]
    agent = seamline.Agent(provider=scripted(script), workspace=repo, worktree=True, store=store, yes=True)

    async def turns() -> str:
        async with agent.session() as session:
            for _ in writes:
                await session.run("write")
            return session.session_id

    return asyncio.run(turns())


def _state(store: Path, run_id: str) -> str:
    opened = open_store(store)
    try:
        tree = worktrees.worktree_of(opened.require(run_id))
        assert tree is not None
        return tree.state
    finally:
        opened.close()


def test_squash_makes_one_commit_of_the_runs_turns(repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    run_id = _run(repo, store, ("a.txt", "A"), ("b.txt", "B"))
    done = worktrees.merge(run_id, store=store, squash=True)
    assert (done.commits, done.squashed, done.into) == (2, True, "main")
    assert git(repo, "rev-list", "--count", "HEAD") == "2"  # init + the squashed commit
    message = git(repo, "log", "-1", "--format=%B")
    assert message.startswith(f"seamline: merge run {run_id[:12]}") and f"seamline run {run_id} turn 2" in message
    assert (repo / "a.txt").read_text() == "A" and not (tmp_path / "worktrees" / run_id).exists()
    assert _state(store, run_id) == "merged"
    assert "a.txt" in worktrees.diff(run_id, store=store, stat=True)  # the branch stays
    with pytest.raises(WorktreeRefused, match="merged already"):
        worktrees.merge(run_id, store=store)
    with pytest.raises(WorktreeRefused, match="was merged"):
        worktrees.discard(run_id, store=store)


def test_a_main_tree_on_another_branch_is_refused(repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    run_id = _run(repo, store, ("a.txt", "A"))
    git(repo, "switch", "--quiet", "-c", "elsewhere")
    before = snapshot(repo)
    with pytest.raises(WorktreeRefused, match=r"is on elsewhere.*check out main"):
        worktrees.merge(run_id, store=store)
    assert snapshot(repo) == before and _state(store, run_id) == "open"


def test_changes_no_turn_committed_are_refused(repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    run_id = _run(repo, store, ("a.txt", "A"))
    (tmp_path / "worktrees" / run_id / "late.txt").write_text("cut short\n")
    before = snapshot(repo)
    with pytest.raises(WorktreeRefused, match="no turn committed"):
        worktrees.merge(run_id, store=store)
    assert snapshot(repo) == before


@pytest.mark.parametrize("squash", [False, True])
def test_a_merge_git_refuses_is_undone(repo: Path, tmp_path: Path, squash: bool) -> None:
    store = tmp_path / "store.db"
    run_id = _run(repo, store, ("a.txt", "from the run\n"))
    (repo / "a.txt").write_text("untracked here\n")  # not dirty (untracked), but the merge would overwrite it
    before = snapshot(repo)
    with pytest.raises(WorktreeRefused, match="as it was"):
        worktrees.merge(run_id, store=store, squash=squash)
    assert snapshot(repo) == before and (repo / "a.txt").read_text() == "untracked here\n"
    assert _state(store, run_id) == "open"


def test_a_run_that_changed_nothing_merges_nothing(repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    run = seamline.run_sync("hi", provider=scripted([{"text": "ok"}]), workspace=repo, store=store, worktree=True)
    before = snapshot(repo)
    done = worktrees.merge(run.session_id, store=store)
    assert (done.commits, done.commit) == (0, None) and snapshot(repo)[:2] == before[:2]


def test_discard_removes_worktree_and_branch_and_keeps_the_session(repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    run_id = _run(repo, store, ("a.txt", "A"))
    gone = worktrees.discard(run_id[:6], store=store)
    assert gone.state == "discarded" and not Path(gone.path).exists()
    assert f"seamline/{run_id[:8]}" not in snapshot(repo)[2]
    assert len(git(repo, "worktree", "list", "--porcelain").split("\n\n")) == 1
    assert _state(store, run_id) == "discarded"
    for action in (worktrees.discard, worktrees.merge):
        with pytest.raises(WorktreeRefused, match="discarded already"):
            action(run_id, store=store)
    with pytest.raises(WorktreeRefused, match="discarded"):
        worktrees.diff(run_id, store=store)


def test_a_run_without_a_worktree_is_refused(repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    plain = seamline.run_sync("hi", provider=scripted([{"text": "ok"}]), workspace=repo, store=store)
    for action in (worktrees.diff, worktrees.merge, worktrees.discard):
        with pytest.raises(WorktreeRefused, match="has no worktree"):
            action(plain.session_id, store=store)


@pytest.mark.parametrize("squash", [False, True])
def test_a_merge_left_half_way_is_undone(repo: Path, tmp_path: Path, squash: bool) -> None:
    # What merge does when git stops on a conflict that the trial merge did not foresee.
    git(repo, "switch", "--quiet", "-c", "other")
    (repo / "README").write_text("other\n")
    (repo / "added.txt").write_text("added\n")
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "other")
    git(repo, "switch", "--quiet", "main")
    (repo / "README").write_text("main\n")
    git(repo, "commit", "--quiet", "-am", "main")
    before = snapshot(repo)
    with pytest.raises(subprocess.CalledProcessError):
        git(repo, "merge", *(["--squash"] if squash else ["--no-edit"]), "other")
    assert snapshot(repo) != before  # git left the conflict in the tree
    _restore(repo, before[0])
    assert snapshot(repo) == before and (repo / "README").read_text() == "main\n"
    assert not (repo / "added.txt").exists() and not (repo / ".git" / "MERGE_HEAD").exists()
    assert not (repo / ".git" / "SQUASH_MSG").exists()
