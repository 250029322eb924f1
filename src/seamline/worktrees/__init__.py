"""Worktree runs: a run works in a new ``git worktree`` of the repository, on a branch of
its own from HEAD, beside the session store; each turn that changed something is one
commit on that branch. Afterwards its changes are shown (:func:`diff`), merged into the
branch it started from (:func:`merge`) or thrown away (:func:`discard`).

``seamline run --worktree``, ``Agent(worktree=True)`` and ``RunOptions(worktree=True)``
start one; see docs/worktrees.md.
"""

from seamline.worktrees.runs import MergeResult, continuing, diff, discard, merge, worktree_of
from seamline.worktrees.worktree import (
    Worktree,
    WorktreeState,
    abandon,
    commit_turn,
    create,
    turn_committer,
    worktrees_dir,
)

__all__ = [
    "MergeResult",
    "Worktree",
    "WorktreeState",
    "abandon",
    "commit_turn",
    "continuing",
    "create",
    "diff",
    "discard",
    "merge",
    "turn_committer",
    "worktree_of",
    "worktrees_dir",
]
