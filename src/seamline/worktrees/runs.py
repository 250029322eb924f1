"""A worktree run after the fact: its diff, its merge into the branch it started from,
or its removal. The store says where the run's worktree is and what became of it.

>>> from seamline import worktrees  # doctest: +SKIP
>>> print(worktrees.diff("1a2b3c4d", store="store.db", stat=True))  # doctest: +SKIP
 notes.txt | 1 +
 1 file changed, 1 insertion(+)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from seamline.errors import WorktreeFailure, WorktreeRefused
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.records import SessionRecord
from seamline.sessions.sqlite_store import open_store
from seamline.worktrees.git import first_line, git, identity_config
from seamline.worktrees.worktree import Worktree, delete_branch, remove_checkout

__all__ = ["MergeResult", "continuing", "diff", "discard", "merge", "worktree_of"]

StoreChoice = SessionStore | str | os.PathLike[str] | None


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What :func:`merge` did: ``commits`` of the run's branch went into ``into`` as
    ``commit`` (``None`` when the run had changed nothing)."""

    run_id: str
    branch: str
    into: str
    commits: int
    commit: str | None
    squashed: bool


def worktree_of(record: SessionRecord) -> Worktree | None:
    """The worktree of a stored run, or ``None`` for a run without one."""
    kept = record.run_options.get("worktree")
    return Worktree.from_record(record.id, kept) if isinstance(kept, dict) else None


def continuing(record: SessionRecord) -> Worktree | None:
    """The worktree a resumed run goes on in; a merged or discarded one is refused."""
    tree = worktree_of(record)
    if tree is not None and tree.state != "open":
        raise WorktreeRefused(f"run {record.id[:12]} was {tree.state}: its worktree is gone; start a new run")
    return tree


@contextmanager
def _opened(store: StoreChoice, *, read_only: bool) -> Iterator[SessionStore]:
    if isinstance(store, SessionStore):
        yield store
        return
    opened = open_store(store, read_only=read_only)
    try:
        yield opened
    finally:
        opened.close()


def _find(store: SessionStore, run_id: str) -> tuple[SessionRecord, Worktree]:
    record = store.require(run_id)
    tree = worktree_of(record)
    if tree is None:
        raise WorktreeRefused(f"run {record.id[:12]} has no worktree (it was not started with --worktree)")
    return record, tree


def diff(run_id: str, *, store: StoreChoice = None, stat: bool = False) -> str:
    """The run's changes against the commit it started from, as ``git diff`` prints them
    (``stat``: ``git diff --stat``): what its turns committed on its branch. ``run_id`` may
    be a unique prefix; ``store`` is an open store, its location, or ``None`` (the default)."""
    with _opened(store, read_only=True) as opened:
        record, tree = _find(opened, run_id)
    if tree.state == "discarded":
        raise WorktreeRefused(f"run {record.id[:12]} was discarded: its branch {tree.branch} is gone")
    args = ["diff", "--no-color", "--no-ext-diff", *(["--stat"] if stat else []), tree.base, tree.branch, "--"]
    return git(args, cwd=_repo(tree)).out


def _repo(tree: Worktree) -> Path:
    repo = Path(tree.repo)
    if not repo.is_dir():
        raise WorktreeRefused(f"run {tree.run_id[:12]}'s repository {repo} is gone")
    return repo


def _refuse_unless_ready(record: SessionRecord, tree: Worktree, doing: str) -> None:
    if tree.state != "open":
        raise WorktreeRefused(f"run {record.id[:12]} was {tree.state} already")
    if record.status == "open":
        raise WorktreeRefused(f"run {record.id[:12]} is still running; {doing} it once its turn has ended")


def merge(run_id: str, *, store: StoreChoice = None, squash: bool = False) -> MergeResult:
    """Merge the run's branch into the branch it started from, in the main working tree
    (a merge commit naming the run; ``squash``: one commit of all its turns), then remove
    its worktree (the branch stays). Refused with :class:`WorktreeRefused`, and nothing
    changed, when the main working tree has uncommitted changes or is on another branch,
    when the run's worktree holds changes no turn committed, or when the merge conflicts."""
    with _opened(store, read_only=False) as opened:
        record, tree = _find(opened, run_id)
        _refuse_unless_ready(record, tree, "merge")
        repo = _repo(tree)
        _check_main_tree(tree, repo)
        result = _merge_into(tree, repo, squash=squash)
        opened.set_run_options(record.id, {"worktree": tree.with_state("merged", merge_commit=result.commit).record()})
    remove_checkout(tree)
    return result


def _check_main_tree(tree: Worktree, repo: Path) -> None:
    name = tree.run_id[:12]
    if Path(tree.path).is_dir() and tree.in_tree(["status", "--porcelain"]).out.strip():
        raise WorktreeRefused(
            f"run {name}'s worktree {tree.path} holds changes no turn committed (a turn was cut short); "
            "resume the run or commit them there, then merge (nothing was changed)"
        )
    if tree.base_branch is None:
        raise WorktreeRefused(
            f"run {name} started from a detached HEAD; merge its branch yourself: git merge {tree.branch}"
        )
    current = git(["symbolic-ref", "--quiet", "--short", "HEAD"], cwd=repo, check=False).out.strip()
    if current != tree.base_branch:
        raise WorktreeRefused(
            f"the main working tree {repo} is on {current or 'a detached HEAD'}, and run {name} started from "
            f"{tree.base_branch}: check out {tree.base_branch}, then merge (nothing was changed)"
        )
    if git(["status", "--porcelain", "--untracked-files=no"], cwd=repo).out.strip():
        raise WorktreeRefused(
            f"the main working tree {repo} has uncommitted changes; commit or stash them, then merge "
            "(nothing was changed)"
        )
    trial = git(
        ["merge-tree", "--write-tree", "--name-only", "--no-messages", "HEAD", tree.branch], cwd=repo, check=False
    )
    if trial.code == 1:
        files = [line for line in trial.out.splitlines()[1:] if line]
        shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        raise WorktreeRefused(
            f"run {name} ({tree.branch}) conflicts with {tree.base_branch} in {shown}; nothing was changed "
            f"(resolve it by hand: git merge {tree.branch})"
        )
    if not trial.ok:
        raise WorktreeFailure(f"git merge-tree failed in {repo}: {first_line(trial.err)}")


def _merge_into(tree: Worktree, repo: Path, *, squash: bool) -> MergeResult:
    into = tree.base_branch or "HEAD"
    before = git(["rev-parse", "HEAD"], cwd=repo).out.strip()
    commits = int(git(["rev-list", "--count", f"HEAD..{tree.branch}"], cwd=repo).out.strip() or 0)
    if commits == 0:
        return MergeResult(tree.run_id, tree.branch, into, 0, None, squash)
    who = identity_config(repo)
    subject = f"seamline: merge run {tree.run_id[:12]} ({tree.branch})"
    if squash:
        turns = git(["log", "--reverse", "--format=%s", f"{tree.base}..{tree.branch}"], cwd=repo).out
        squashed = "1 commit squashed" if commits == 1 else f"{commits} commits squashed"
        message = f"{subject}, {squashed}\n\n{turns}\nSeamline-Run: {tree.run_id}\n"
        done = git(["merge", "--squash", "--quiet", tree.branch], cwd=repo, check=False, config=who)
        if done.ok:
            done = git(["commit", "--quiet", "--no-verify", "-m", message], cwd=repo, check=False, config=who)
    else:
        message = f"{subject}\n\nSeamline-Run: {tree.run_id}\n"
        args = ["merge", "--no-ff", "--no-edit", "--quiet", "-m", message, tree.branch]
        done = git(args, cwd=repo, check=False, config=who)
    if not done.ok:
        conflicts = git(["diff", "--name-only", "--diff-filter=U"], cwd=repo, check=False).out.split()
        why = f"it conflicts in {', '.join(conflicts[:5])}" if conflicts else first_line(done.err or done.out)
        _restore(repo, before)
        raise WorktreeRefused(
            f"merging run {tree.run_id[:12]} into {into} failed: {why}; the main working tree is as it was"
        )
    after = git(["rev-parse", "HEAD"], cwd=repo).out.strip()
    return MergeResult(tree.run_id, tree.branch, into, commits, after, squash)


def _restore(repo: Path, before: str) -> None:
    """Undo a merge that failed half-way: the index and files as they were, HEAD at ``before``."""
    if git(["rev-parse", "--quiet", "--verify", "MERGE_HEAD"], cwd=repo, check=False).ok:
        git(["merge", "--abort"], cwd=repo, check=False)
    else:
        git(["reset", "--quiet", "--merge"], cwd=repo, check=False)  # a squash: no MERGE_HEAD, SQUASH_MSG goes too
    if git(["rev-parse", "HEAD"], cwd=repo).out.strip() != before:
        raise WorktreeFailure(f"a failed merge moved HEAD in {repo}; it was at {before}")


def discard(run_id: str, *, store: StoreChoice = None) -> Worktree:
    """Remove the run's worktree and its branch; the session stays in the store, marked
    ``discarded``. A merged run is refused (its branch is the record of its turns)."""
    with _opened(store, read_only=False) as opened:
        record, tree = _find(opened, run_id)
        if tree.state == "merged":
            raise WorktreeRefused(
                f"run {record.id[:12]} was merged; its branch {tree.branch} stays as the record of its turns "
                f"(delete it with git branch -D {tree.branch})"
            )
        _refuse_unless_ready(record, tree, "discard")
        remove_checkout(tree)
        delete_branch(tree)
        gone = tree.with_state("discarded")
        opened.set_run_options(record.id, {"worktree": gone.record()})
    return gone
