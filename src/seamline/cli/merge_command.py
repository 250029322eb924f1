"""``seamline merge RUN [--squash]``: a worktree run's branch into the branch it started from."""

from __future__ import annotations

import argparse
import json
from typing import Any, Final

__all__ = ["add_parser", "run"]

_EPILOG: Final = """\
examples:
  seamline merge 3f9c0e12            a merge commit naming the run, in the main working tree
  seamline merge 3f9c0e12 --squash   one commit holding all the run's turns

The merge happens in the repository's main working tree, on the branch the run started
from. It is refused, and nothing changed, when that tree has uncommitted changes or is on
another branch, or when the run's branch conflicts with it (resolve by hand then: git
merge BRANCH). A merged run's worktree is removed; its branch stays.

exit codes: 0 merged, 1 git failed, 2 refused or usage error (dirty tree, conflict, unknown run)
"""


def add_parser(commands: Any) -> str:
    parser = commands.add_parser(
        "merge",
        help="merge a worktree run's branch into the branch it started from",
        description="Merge the branch of RUN (started with `seamline run --worktree`) into the branch it started "
        "from, in the repository's main working tree, and remove the run's worktree.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    parser.add_argument("run_id", metavar="RUN", help="the run's session id, or a unique prefix of it")
    parser.add_argument("--squash", action="store_true", help="one commit of all the run's turns")
    parser.add_argument("--store", metavar="PATH|URL", help="the session store (default: $SEAMLINE_STORE)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return "merge"


def run(args: argparse.Namespace) -> int:
    from seamline.worktrees import merge

    done = merge(args.run_id, store=args.store, squash=args.squash)
    if args.json:
        print(json.dumps({"run_id": done.run_id, "branch": done.branch, "into": done.into, "commits": done.commits,
                          "commit": done.commit, "squashed": done.squashed}))  # fmt: skip
    elif done.commit is None:
        print(f"run {done.run_id[:12]} changed nothing: nothing merged into {done.into}; its worktree is removed")
    else:
        how = "squashed into" if done.squashed else "merged into"
        print(
            f"run {done.run_id[:12]} ({done.branch}, {done.commits} commit{'' if done.commits == 1 else 's'}) {how} {done.into}: {done.commit[:12]}"
        )
    return 0
