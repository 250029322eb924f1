"""One run's git worktree: made from the repository's HEAD on a branch of its own, a
commit at the end of each turn that changed something, removed when the run is done.

>>> from seamline.worktrees import create  # doctest: +SKIP
>>> tree = create("path/to/repo", run_id="1a2b3c4d" * 4, store="store.db")  # doctest: +SKIP
>>> tree.branch, tree.state  # doctest: +SKIP
('seamline/1a2b3c4d', 'open')
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Final, Literal, get_args

from seamline.errors import WorktreeFailure, WorktreeRefused
from seamline.events import Complete
from seamline.locations import data_home, default_store_path
from seamline.worktrees.git import GitResult, first_line, git, identity_config

__all__ = [
    "Worktree",
    "WorktreeState",
    "abandon",
    "commit_turn",
    "create",
    "delete_branch",
    "remove_checkout",
    "turn_committer",
    "worktrees_dir",
]

WorktreeState = Literal["open", "merged", "discarded"]
_STATES: Final = frozenset(get_args(WorktreeState))


@dataclass(frozen=True, slots=True, kw_only=True)
class Worktree:
    """A run's worktree, as the session's stored run options keep it (``worktree``).

    ``repo`` is the main working tree, ``base`` the commit the run started from and
    ``base_branch`` the branch checked out there then (``None``: a detached HEAD);
    ``path`` is the worktree, ``workspace`` the folder the run works in (the same place
    in the worktree as the workspace given in the repository), ``git_dir`` the worktree's
    own git directory in the repository. ``state``: ``open``, ``merged`` or ``discarded``.
    """

    run_id: str
    repo: str
    path: str
    workspace: str
    git_dir: str
    branch: str
    base: str
    base_branch: str | None
    state: WorktreeState = "open"
    merge_commit: str | None = None

    def record(self) -> dict[str, str]:
        """The worktree as kept in the store (empty values left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None and k != "run_id"}

    @classmethod
    def from_record(cls, run_id: str, kept: Mapping[str, object]) -> Worktree:
        """The worktree of run ``run_id`` from what the store kept."""
        found = {k: v for k, v in kept.items() if isinstance(v, str)}
        try:
            tree = cls(run_id=run_id, **found)  # type: ignore[arg-type]
        except TypeError:
            raise WorktreeFailure(f"the store's record of run {run_id[:12]}'s worktree is damaged") from None
        if tree.state not in _STATES:
            raise WorktreeFailure(f"the store's record of run {run_id[:12]}'s worktree is damaged")
        return tree

    def with_state(self, state: WorktreeState, *, merge_commit: str | None = None) -> Worktree:
        return replace(self, state=state, merge_commit=merge_commit or self.merge_commit)

    def in_tree(self, args: list[str], *, check: bool = True, config: Sequence[tuple[str, str]] = ()) -> GitResult:
        """``git ARGS`` inside the worktree, its git directory named explicitly (never
        read from the worktree's ``.git`` file, which the run could have rewritten)."""
        path = Path(self.path)
        return git(args, cwd=path, git_dir=Path(self.git_dir), work_tree=path, check=check, config=config)


def worktrees_dir(store: str | os.PathLike[str] | None = None) -> Path:
    """``worktrees/`` beside the store file (or the default store's file, for a store on a
    server or in memory)."""
    where = str(store) if store is not None else ""
    if not where or "://" in where or where == ":memory:":
        where = str(default_store_path())
    return Path(where).expanduser().resolve().parent / "worktrees"


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _place(store: str | os.PathLike[str] | None, repo: Path, run_id: str) -> Path:
    for folder in (worktrees_dir(store), (data_home() / "worktrees").resolve()):
        if not _inside(folder, repo):
            return folder / run_id
    raise WorktreeRefused(
        f"the store and the data folder lie inside {repo}; a run's worktree goes beside the store and never "
        "inside the repository: use a --store outside it"
    )


def _repository(workspace: str | os.PathLike[str]) -> tuple[Path, Path, str, str | None]:
    """The main working tree holding ``workspace``, the workspace, HEAD and its branch."""
    folder = Path(workspace).expanduser()
    if not folder.is_dir():
        raise WorktreeRefused(f"workspace {workspace} is not a folder")
    folder = folder.resolve()
    top = git(["rev-parse", "--show-toplevel"], cwd=folder, check=False)
    if not top.ok or not top.out.strip():
        raise WorktreeRefused(
            f"--worktree needs a git repository, and {folder} is not in one (run `git init` and commit, "
            "or give another --workspace)"
        )
    repo = Path(top.out.strip()).resolve()
    head = git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], cwd=repo, check=False)
    if not head.ok:
        raise WorktreeRefused(f"{repo} has no commit yet; a run's branch starts from HEAD: commit first")
    branch = git(["symbolic-ref", "--quiet", "--short", "HEAD"], cwd=repo, check=False).out.strip()
    return repo, folder, head.out.strip(), branch or None


@contextmanager
def _repository_lock(repo: Path) -> Iterator[None]:
    """Hold the repository's worktree lock (a file in its common git folder): git's
    ``worktree add`` and ``remove`` are not safe to run at once on one repository (one may
    fail reading another's half-made ``.git/worktrees/NAME``), so seamline's own calls take
    turns, across threads and processes."""
    found = git(["rev-parse", "--git-common-dir"], cwd=repo, check=False)
    common = (repo / found.out.strip()).resolve() if found.ok and found.out.strip() else repo / ".git"
    try:
        handle = open(common / "seamline-worktrees.lock", "a+b")  # flock: per open file, so threads queue too
    except OSError as exc:
        raise WorktreeFailure(f"cannot lock the worktrees of {repo}: {exc.strerror or exc}") from None
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def create(
    workspace: str | os.PathLike[str],
    *,
    run_id: str,
    store: str | os.PathLike[str] | None = None,
    branch: str | None = None,
    start: str | None = None,
) -> Worktree:
    """A new worktree for run ``run_id`` of the repository holding ``workspace``, on branch
    ``branch`` (default ``seamline/<first 8 characters of run_id>``) from its HEAD (or the
    commit ``start`` names), in ``worktrees/<run_id>`` beside ``store`` (a file path; see
    :func:`worktrees_dir`). Uncommitted changes in the repository stay there."""
    repo, folder, base, base_branch = _repository(workspace)
    if start is not None:
        named = git(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{start}^{{commit}}"], cwd=repo, check=False
        )
        if not named.ok or start.startswith("-"):
            raise WorktreeRefused(f"{repo} has no commit {start!r}")
        base = named.out.strip()
    name = branch or f"seamline/{run_id[:8]}"
    if not git(["check-ref-format", "--branch", name], cwd=repo, check=False).ok or name.startswith("-"):
        raise WorktreeRefused(f"not a usable branch name: {name!r}")
    if git(["show-ref", "--verify", "--quiet", f"refs/heads/{name}"], cwd=repo, check=False).ok:
        raise WorktreeRefused(f"branch {name} exists already in {repo}; choose another with --branch")
    root = _place(store, repo, run_id)
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorktreeFailure(f"cannot make the worktrees folder {root.parent}: {exc.strerror or exc}") from None
    with _repository_lock(repo):
        made = git(["worktree", "add", "--quiet", "-b", name, str(root), base], cwd=repo, check=False)
    if not made.ok:
        raise WorktreeFailure(f"git could not make a worktree of {repo} at {root}: {first_line(made.err)}")
    git_dir = git(["rev-parse", "--absolute-git-dir"], cwd=root).out.strip()
    return Worktree(
        run_id=run_id,
        repo=str(repo),
        path=str(root),
        workspace=str(root / folder.relative_to(repo)),
        git_dir=git_dir,
        branch=name,
        base=base,
        base_branch=base_branch,
    )


def commit_turn(tree: Worktree, *, turn: int, outcome: str = "completed") -> str | None:
    """Commit everything the turn changed in the worktree (``git add --all``) on the run's
    branch; the commit's id, or ``None`` when the turn changed nothing."""
    if not Path(tree.path).is_dir():
        raise WorktreeFailure(f"run {tree.run_id[:12]}'s worktree {tree.path} is gone; the turn was not committed")
    tree.in_tree(["add", "--all"])
    staged = tree.in_tree(["diff", "--cached", "--quiet"], check=False)
    if staged.code == 0:
        return None
    if staged.code != 1:
        raise WorktreeFailure(f"git diff failed in {tree.path}: {first_line(staged.err)}")
    message = f"seamline run {tree.run_id} turn {turn}\n\nOutcome: {outcome}.\n\nSeamline-Run: {tree.run_id}\n"
    tree.in_tree(["commit", "--quiet", "--no-verify", "-m", message], config=identity_config(Path(tree.repo)))
    return tree.in_tree(["rev-parse", "HEAD"]).out.strip()


def turn_committer(tree: Worktree) -> Callable[[int, Complete], Awaitable[None]]:
    """A turn hook (``ProviderSession.turn_hooks``) that commits each turn's changes."""

    async def commit(turn: int, final: Complete) -> None:
        await asyncio.to_thread(commit_turn, tree, turn=turn, outcome=final.outcome)

    return commit


def remove_checkout(tree: Worktree) -> None:
    """Remove the worktree's folder and git's record of it (the branch stays)."""
    repo = Path(tree.repo)
    if repo.is_dir():
        with _repository_lock(repo):
            gone = git(["worktree", "remove", "--force", "--force", tree.path], cwd=repo, check=False)
        if gone.ok:
            return
    if Path(tree.path).exists():
        shutil.rmtree(tree.path, ignore_errors=True)
    if Path(tree.path).exists():
        raise WorktreeFailure(f"cannot remove run {tree.run_id[:12]}'s worktree {tree.path}")
    if repo.is_dir():
        with _repository_lock(repo):
            git(["worktree", "prune"], cwd=repo, check=False)


def delete_branch(tree: Worktree) -> None:
    """Delete the run's branch (it may be gone already)."""
    repo = Path(tree.repo)
    if not repo.is_dir():
        return
    if git(["show-ref", "--verify", "--quiet", f"refs/heads/{tree.branch}"], cwd=repo, check=False).ok:
        git(["branch", "--quiet", "-D", tree.branch], cwd=repo)


def abandon(tree: Worktree) -> None:
    """Remove the worktree and the branch of a run that never started."""
    remove_checkout(tree)
    delete_branch(tree)
